import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from history.models import BackgroundProcess, InstanceState, ProcessKind, Task, TaskState
from testkit.driver import task_step

ROOT = Path(__file__).resolve().parents[2]


def test_runner_and_worker_commands_run_a_workflow_to_success(engine, caplog):
    instance = engine.start(engine.define([task_step("a"), task_step("b", after=["a"])]))
    for _ in range(2):
        call_command("weave_runner", "--once")
        call_command("weave_worker", "--queue", "payments", "--once")
        call_command("weave_runner", "--once")
        call_command("weave_runner", "--once")
    assert engine.reload(instance).state == InstanceState.SUCCEEDED
    ran = [r.getMessage() for r in caplog.records if r.name == "weave.worker"]
    assert len(ran) == 2 and all(line.endswith("attempt 1: demo.echo") for line in ran)


def test_worker_command_refuses_an_unknown_queue(engine):
    with pytest.raises(CommandError, match="--queue"):
        call_command("weave_worker", "--namespace", "acme", "--queue", "nowhere", "--once")


def _env() -> dict:
    """The environment of a command run against this test run's MariaDB database."""
    database = settings.DATABASES["default"]
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    url = f"mysql://{database['USER']}{password}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    return {**os.environ, "WEAVE_DATABASE_URL": url}


def _manage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's in-memory test database")
def test_a_runner_sent_sigterm_exits_cleanly_and_its_row_records_the_stop(engine):
    process = subprocess.Popen(
        [sys.executable, "manage.py", "weave_runner", "--interval", "0.1"], cwd=ROOT, env=_env(), stderr=subprocess.PIPE
    )
    try:
        # Running: its row is there and a beat after the start has been written.
        for _ in range(600):
            if BackgroundProcess.objects.filter(pid=process.pid, passes__gte=1).exists():
                break
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
    row = BackgroundProcess.objects.get(pid=process.pid)
    assert row.kind == ProcessKind.RUNNER and row.passes >= 1 and row.stopped_at is not None
