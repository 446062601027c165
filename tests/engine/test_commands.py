import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from history.models import InstanceState, Task, TaskState
from testkit.driver import task_step

ROOT = Path(__file__).resolve().parents[2]


def test_runner_and_worker_commands_run_a_workflow_to_success(engine, capsys):
    instance = engine.start(engine.define([task_step("a"), task_step("b", after=["a"])]))
    for _ in range(2):
        call_command("weave_runner", "--once")
        call_command("weave_worker", "--queue", "payments", "--once")
        call_command("weave_runner", "--once")
        call_command("weave_runner", "--once")
    assert engine.reload(instance).state == InstanceState.SUCCEEDED
    assert "demo.echo" in capsys.readouterr().out


def test_worker_command_refuses_an_unknown_queue(engine):
    with pytest.raises(CommandError, match="--queue"):
        call_command("weave_worker", "--namespace", "acme", "--queue", "nowhere", "--once")


def _manage(*args: str) -> subprocess.CompletedProcess:
    database = settings.DATABASES["default"]
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    url = f"mysql://{database['USER']}{password}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    env = {**os.environ, "WEAVE_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's in-memory test database")
def test_separate_runner_and_worker_processes_run_a_workflow(engine):
    instance = engine.start(engine.define([task_step("a"), task_step("b", after=["a"])]))
    assert _manage("weave_runner", "--once").returncode == 0  # activates a
    for _ in range(2):
        worker = _manage("weave_worker", "--queue", "payments", "--once", "--concurrency", "2")
        assert worker.returncode == 0, worker.stderr
        assert _manage("weave_runner", "--once").returncode == 0  # consumes the result, advances
    assert engine.reload(instance).state == InstanceState.SUCCEEDED
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.SUCCEEDED}
    check = _manage("weave_check")
    assert check.returncode == 0 and "clean" in check.stdout
