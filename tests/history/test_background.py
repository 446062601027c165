"""The background's heartbeat rows: written one statement at a time, forgotten after a week of silence, and read
back as the background's status with staleness by the engine's clock and each caller's visibility."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from core.identity import Identity
from history.background import FORGET_AFTER, background_process_beat, background_process_start
from history.models import BackgroundProcess, ProcessKind, Scope
from history.selectors.background import RECENTLY_STOPPED, background_status
from history.tenancy import namespace_ensure

pytestmark = pytest.mark.django_db

STALE = dt.timedelta(seconds=30)


def _process(kind=ProcessKind.RUNNER, *, queue="", namespace=None, pid=1, **fields) -> BackgroundProcess:
    row = BackgroundProcess(kind=kind, host="h1", pid=pid, queue=queue, namespace=namespace, **fields)
    background_process_start(process=row)
    return row


def _identity(namespace, queues=None) -> Identity:
    return Identity(namespace_id=namespace.id, actor_id="a" * 32, scopes=frozenset({Scope.READ}), queues=queues)


def test_a_beat_is_one_update_and_a_row_never_inserted_is_inserted_by_it():
    row = _process()
    row.passes, row.items, row.beat_at = 3, 7, clock.now()
    with CaptureQueriesContext(connection) as captured:
        background_process_beat(process=row)
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["UPDATE"]
    assert BackgroundProcess.objects.values_list("passes", "items").get() == (3, 7)
    missed = BackgroundProcess(kind=ProcessKind.RUNNER, host="h1", pid=2, passes=1)
    background_process_beat(process=missed)
    assert BackgroundProcess.objects.get(pk=missed.pk).passes == 1


def test_a_starting_process_deletes_the_rows_of_processes_silent_for_a_week():
    long_gone = _process(pid=1)
    stopped_long_ago = _process(pid=2, stopped_at=clock.now())
    recent = _process(pid=3)
    old = clock.now() - FORGET_AFTER - dt.timedelta(minutes=1)
    BackgroundProcess.objects.filter(pk__in=[long_gone.pk, stopped_long_ago.pk]).update(beat_at=old)
    BackgroundProcess.objects.filter(pk=recent.pk).update(beat_at=old + dt.timedelta(minutes=2))
    starting = _process(pid=4)
    assert set(BackgroundProcess.objects.values_list("pk", flat=True)) == {recent.pk, starting.pk}


def test_a_process_is_stale_once_its_beat_is_older_than_the_setting_by_the_engines_clock(settings):
    settings.WEAVE_HEARTBEAT_STALE_SECONDS = 30
    runner = _process()
    worker = _process(ProcessKind.WORKER, queue="payments", pid=2)
    status = background_status(identity=None)
    assert [p.stale for p in status.processes] == [False, False]
    assert (status.runners_alive, status.workers_alive, status.stale) == (1, 1, 0)
    with clock.moved(STALE + dt.timedelta(seconds=1)):
        status = background_status(identity=None)
        assert {p.process.pk: p.stale for p in status.processes} == {runner.pk: True, worker.pk: True}
        assert (status.runners_alive, status.workers_alive, status.stale) == (0, 0, 2)
        assert all(p.age > STALE for p in status.processes)
        runner.beat_at = clock.now()
        background_process_beat(process=runner)
        status = background_status(identity=None)
    assert (status.runners_alive, status.workers_alive, status.stale) == (1, 0, 1)
    assert status.processes[0].process.pk == runner.pk  # the most recent beat first


def test_a_stopped_process_is_shown_for_an_hour_and_is_never_stale_or_alive():
    row = _process()
    row.stopped_at = clock.now()
    background_process_beat(process=row)
    with clock.moved(RECENTLY_STOPPED - dt.timedelta(minutes=1)):
        status = background_status(identity=None)
        assert [p.process.pk for p in status.processes] == [row.pk]
        assert (status.processes[0].stale, status.runners_alive, status.stale) == (False, 0, 0)
    with clock.moved(RECENTLY_STOPPED + dt.timedelta(minutes=1)):
        assert background_status(identity=None).processes == []


def test_a_caller_sees_every_runner_and_only_the_workers_of_its_namespace_on_its_queues(tenancy):
    acme = tenancy[0]
    rival = namespace_ensure(name="rival", application="billing", queues=["payments"])[0]
    runner = _process()
    payments = _process(ProcessKind.WORKER, queue="payments", namespace=acme, pid=2)
    ledger = _process(ProcessKind.WORKER, queue="ledger", namespace=acme, pid=3)
    _process(ProcessKind.WORKER, queue="payments", namespace=rival, pid=4)

    def seen(identity):
        return {p.process.pk for p in background_status(identity=identity).processes}

    assert seen(_identity(acme)) == {runner.pk, payments.pk, ledger.pk}
    assert seen(_identity(acme, queues=frozenset({"ledger"}))) == {runner.pk, ledger.pk}
    assert len(seen(None)) == 4
    assert background_status(identity=_identity(acme, queues=frozenset({"ledger"}))).workers_alive == 1
