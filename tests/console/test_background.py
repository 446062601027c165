"""The console home's "The background": the running processes with the age of their last beat, and a visible
warning when a beat is stale or no runner beats, read with one query."""

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from history.background import background_process_beat, background_process_start
from history.models import BackgroundProcess, ProcessKind
from history.tenancy import namespace_ensure

pytestmark = pytest.mark.django_db

WARNING = re.compile(r'<div class="errornote" role="alert" id="background-warning">(.*?)</div>', re.S)


def _started(kind=ProcessKind.RUNNER, **fields) -> BackgroundProcess:
    row = BackgroundProcess(kind=kind, host="node-1", pid=fields.pop("pid", 100), **fields)
    background_process_start(process=row)
    return row


def _home(client) -> str:
    response = client.get("/admin/")
    assert response.status_code == 200
    return response.content.decode()


def _warning(html: str) -> str:
    found = WARNING.search(html)
    return found.group(1) if found else ""


def _shown(html: str) -> list[str]:
    return re.findall(r'<tr data-process="([^"]+)"', html)


def test_no_runner_beating_is_a_visible_warning(client, console_user):
    client.force_login(console_user("olga", "operators"))
    html = _home(client)
    assert 'id="background"' in html and "No runner or worker is running." in html
    assert "No runner has beaten in the last 30 s" in _warning(html)


def test_live_processes_are_listed_with_their_last_beat_and_no_warning(client, console_user, tenancy):
    runner = _started()
    worker = _started(ProcessKind.WORKER, pid=101, queue="payments", namespace=tenancy[0])
    stopped = _started(pid=102)
    stopped.stopped_at = clock.now()
    background_process_beat(process=stopped)
    client.force_login(console_user("olga", "operators"))
    with clock.moved(dt.timedelta(seconds=12)):
        html = _home(client)
    assert _warning(html) == ""
    assert set(_shown(html)) == {runner.id, worker.id}  # a stopped process is not live
    assert re.search(r"<td data-age[^>]*>1[23] s ago</td>", html)


def test_a_stale_heartbeat_is_a_visible_warning_and_its_row_is_marked(client, console_user):
    runner = _started()
    client.force_login(console_user("olga", "operators"))
    with clock.moved(dt.timedelta(minutes=3)):
        html = _home(client)
    warning = _warning(html)
    assert "1 stale heartbeat:" in warning and "No runner has beaten" in warning
    assert f'<tr data-process="{runner.id}" data-stale>' in html and "3 min ago <strong>stale</strong>" in html


def test_an_operator_sees_the_runners_and_its_own_workers_and_a_superuser_every_process(client, console_user, tenancy):
    rival = namespace_ensure(name="rival", application="billing", queues=["payments"])[0]
    runner = _started()
    own = _started(ProcessKind.WORKER, pid=101, queue="payments", namespace=tenancy[0])
    other = _started(ProcessKind.WORKER, pid=102, queue="payments", namespace=rival)
    client.force_login(console_user("olga", "operators"))
    assert set(_shown(_home(client))) == {runner.id, own.id}
    client.force_login(User.objects.create_superuser("root"))
    assert set(_shown(_home(client))) == {runner.id, own.id, other.id}


def test_the_home_reads_the_background_with_one_query(client, console_user, tenancy):
    for pid in range(5):
        _started(pid=pid)
        _started(ProcessKind.WORKER, pid=100 + pid, queue="payments", namespace=tenancy[0])
    client.force_login(console_user("olga", "operators"))
    with CaptureQueriesContext(connection) as captured:
        _home(client)
    table = BackgroundProcess._meta.db_table
    assert len([q for q in captured.captured_queries if table in q["sql"]]) == 1
