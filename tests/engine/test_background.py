"""The runner and the workers outlive a database outage instead of exiting, and keep a heartbeat row each."""

import datetime as dt
import os
import socket
import threading

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from core import clock
from engine import background, runner
from engine.background import BACKOFF_SECONDS, BEAT_EVERY, Outage, ProcessBeat
from engine.management.commands import weave_runner, weave_worker
from history import background as heartbeat_writes
from history.background import FORGET_AFTER
from history.models import BackgroundProcess, ProcessKind
from testkit import states
from tests.engine.conftest import StoppingRecorder


def test_a_database_error_is_logged_and_backed_off_and_the_next_unit_runs(caplog):
    stopping = StoppingRecorder()
    outage = Outage("weave_runner", stopping)
    calls = iter([OperationalError("server has gone away"), OperationalError("again"), {"inbox": 1}])

    def work():
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert outage.run(work) is None
    assert outage.run(work) is None
    assert outage.run(work) == {"inbox": 1}
    assert stopping.waited == list(BACKOFF_SECONDS[:2])
    assert outage.failures == 0
    assert [r.getMessage() for r in caplog.records] == [
        "weave_runner: database error (OperationalError); retrying in 0.5 s",
        "weave_runner: database error (OperationalError); retrying in 1 s",
    ]


def test_the_backoff_stops_growing_at_its_last_step():
    stopping = StoppingRecorder()
    outage = Outage("w", stopping)

    def down():
        raise OperationalError("down")

    for _ in range(len(BACKOFF_SECONDS) + 3):
        outage.run(down)
    assert stopping.waited[-4:] == [BACKOFF_SECONDS[-1]] * 4


def test_an_error_that_is_not_the_database_still_ends_the_process():
    outage = Outage("w", StoppingRecorder())

    def broken():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        outage.run(broken)


# ---- the heartbeat ---------------------------------------------------------------------------


def _row(beat: ProcessBeat) -> BackgroundProcess:
    return BackgroundProcess.objects.get(pk=beat.process.pk)


def _stopping_after(passes: int) -> type[threading.Event]:
    """A command's stop flag that is raised once its loop has asked it ``passes`` times."""

    class StoppingAfter(threading.Event):
        asked = 0

        def is_set(self):
            self.asked += 1
            return super().is_set() or self.asked > passes

    return StoppingAfter


def test_a_runner_run_once_records_its_start_its_pass_and_its_clean_stop(engine):
    states.started(engine, 2)
    call_command("weave_runner", "--once")
    row = BackgroundProcess.objects.get()
    assert (row.kind, row.host, row.pid, row.queue, row.namespace_id) == (
        ProcessKind.RUNNER,
        socket.gethostname(),
        os.getpid(),
        "",
        None,
    )
    assert row.passes == 1 and row.items >= 2  # two instances advanced, at the least
    assert row.started_at <= row.beat_at <= row.stopped_at


def test_a_worker_run_once_records_its_queue_its_namespace_and_the_tasks_it_ran(engine):
    states.started(engine, 3)
    runner.runner_settle()
    call_command("weave_worker", "--queue", "payments", "--once", "--batch", "5")
    row = BackgroundProcess.objects.get()
    assert (row.kind, row.queue, row.namespace_id) == (ProcessKind.WORKER, "payments", engine.namespace.id)
    assert (row.passes, row.items) == (1, 3) and row.stopped_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_runner_loop_writes_at_most_one_update_a_pass_and_its_stop(engine, monkeypatch):
    def a_second_each(**options):
        clock.advance(max(BEAT_EVERY, dt.timedelta(seconds=runner.PACED_SECONDS["watchdog"])))  # both are due
        return runner.runner_pass(**options)

    monkeypatch.setattr(weave_runner, "runner_pass", a_second_each)
    monkeypatch.setattr(background.threading, "Event", _stopping_after(3))
    with CaptureQueriesContext(connection) as captured:
        call_command("weave_runner", "--interval", "0.01")
    table = BackgroundProcess._meta.db_table
    statements = [q["sql"] for q in captured.captured_queries if table in q["sql"]]
    # Each pass's watchdog reads the live workers (engine.watchdog): a read of each pass, apart from the beats.
    watchdog = [sql for sql in statements if sql.startswith("SELECT") and "stopped_at" in sql]
    assert len(watchdog) == 3
    writes = [sql.split()[0] for sql in statements if sql not in watchdog]
    # The start looks for long-silent rows (none) and inserts its own; a beat per pass; the stop.
    assert writes == ["SELECT", "INSERT", "UPDATE", "UPDATE", "UPDATE", "UPDATE"]
    row = BackgroundProcess.objects.get()
    assert row.passes == 3 and row.stopped_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_worker_loop_beats_after_its_claims_and_records_its_stop(engine, monkeypatch):
    states.started(engine, 2)
    runner.runner_settle()
    monkeypatch.setattr(weave_worker.threading, "Event", _stopping_after(3))
    call_command("weave_worker", "--queue", "payments", "--interval", "0.01", "--batch", "5")
    row = BackgroundProcess.objects.get()
    assert (row.kind, row.queue, row.passes, row.items) == (ProcessKind.WORKER, "payments", 3, 2)
    assert row.stopped_at is not None


def test_beats_within_a_second_of_the_last_write_are_counted_and_written_with_the_next(engine):
    beat = ProcessBeat(ProcessKind.RUNNER)
    beat.start()
    with CaptureQueriesContext(connection) as captured:
        for _ in range(5):
            beat.beat(2)
    assert captured.captured_queries == []
    with clock.moved(BEAT_EVERY):
        beat.beat(1)
    assert (_row(beat).passes, _row(beat).items) == (6, 11)


@pytest.mark.django_db(transaction=True)  # Outage closes the connection, as it would after a real outage
def test_a_database_outage_loses_no_count_and_a_start_it_missed_is_inserted_by_the_next_beat(engine, monkeypatch):
    real = heartbeat_writes.background_process_beat
    failures = [OperationalError("server has gone away")]

    def flaky(**kwargs):
        if failures:
            raise failures.pop()
        return real(**kwargs)

    monkeypatch.setattr(background, "background_process_start", lambda **_: flaky())
    monkeypatch.setattr(background, "background_process_beat", flaky)
    stopping = StoppingRecorder()
    outage = Outage("weave_runner", stopping)
    beat = ProcessBeat(ProcessKind.RUNNER)
    assert outage.run(beat.start) is None and stopping.waited == [BACKOFF_SECONDS[0]]
    failures.append(OperationalError("again"))
    assert outage.run(lambda: beat.beat(4)) is None
    assert not BackgroundProcess.objects.exists()
    outage.run(lambda: beat.beat(1))
    row = _row(beat)
    assert (row.passes, row.items, row.started_at) == (2, 5, beat.process.started_at)


def test_a_stop_the_database_cannot_record_is_logged_and_the_process_ends(engine, monkeypatch, caplog):
    beat = ProcessBeat(ProcessKind.RUNNER)
    beat.start()

    def down(**kwargs):
        raise OperationalError("server has gone away")

    monkeypatch.setattr(background, "background_process_beat", down)
    beat.stop()
    assert "the stop was not recorded (OperationalError)" in caplog.text
    assert _row(beat).stopped_at is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="SQLite's shared-cache test database locks whole tables")
def test_a_workers_threads_share_its_row_and_its_counts_are_exact_while_others_start(engine, monkeypatch):
    monkeypatch.setattr(background, "BEAT_EVERY", dt.timedelta(0))  # every beat writes
    beat = ProcessBeat(ProcessKind.WORKER, queue="payments", namespace_id=engine.namespace.id)
    beat.start()
    long_ago = clock.now() - FORGET_AFTER - dt.timedelta(hours=1)
    BackgroundProcess.objects.bulk_create(
        BackgroundProcess(kind=ProcessKind.RUNNER, host="gone", pid=pid, beat_at=long_ago) for pid in range(20)
    )
    seen = []

    def work(n: int) -> None:
        try:
            for _ in range(25):
                beat.beat(2)
                seen.append(BackgroundProcess.objects.filter(pk=beat.process.pk).values_list("passes", flat=True)[0])
            ProcessBeat(ProcessKind.RUNNER).start()  # another process starting, deleting the long-silent rows
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    beat.stop()
    row = _row(beat)
    assert (row.passes, row.items) == (200, 400) and row.stopped_at is not None
    assert BackgroundProcess.objects.filter(kind=ProcessKind.RUNNER).count() == 8  # the silent ones deleted
    assert max(seen) <= 200
