"""Real threads against MariaDB: row locks, SKIP LOCKED and the lock order under contention."""

import datetime as dt
import threading
import time
from collections import Counter

import pytest
from django.db import connection, transaction

from core import clock
from core.db.base import pin_node
from engine import inbox
from engine.check import invariants_check
from engine.handlers import claim_execute
from engine.instances import instance_cancel
from engine.runner import pass_lease_expiry, runner_pass, runner_settle
from engine.signaling import signal_accept
from engine.worker import task_claim_batch, task_complete
from history.locking import Level, LockSet
from history.models import (
    Attempt,
    InboxRecord,
    InboxState,
    InstanceEvent,
    Queue,
    ResultEvent,
    Task,
    TaskState,
    WorkflowInstance,
)
from testkit.driver import poll_step, task_step

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql",
        reason="SQLite's test database is one shared-cache in-memory file: it serialises writers and has no row locks",
    ),
]


def _threads(*targets):
    """Run the targets in real threads started together; re-raise the first error of any."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def run(index, target):
        try:
            with pin_node(index):  # on a cluster, the threads are spread over its nodes
                barrier.wait()
                target()
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]


def test_two_runners_never_consume_one_inbox_record_twice(engine, monkeypatch):
    definition = engine.define([task_step("a"), task_step("b")])
    for _ in range(6):
        engine.start(definition)
    runner_settle()
    while engine.work() is not None:
        pass
    pending = set(InboxRecord.objects.filter(state=InboxState.PENDING).values_list("id", flat=True))
    assert len(pending) == 12
    applied: list[str] = []
    lock = threading.Lock()
    original = inbox._apply_result

    def counting(locks, graph, record, *sources):
        def committed():
            with lock:
                applied.append(record.id)

        # Counted once its transaction commits: on a cluster an attempt certification aborts is retried.
        transaction.on_commit(committed)
        return original(locks, graph, record, *sources)

    monkeypatch.setattr(inbox, "_apply_result", counting)

    def runner():
        for _ in range(5):
            runner_pass()

    _threads(runner, runner)
    assert Counter(applied) == Counter(pending)
    assert not InboxRecord.objects.filter(state=InboxState.PENDING).exists()
    assert invariants_check() == []


def test_a_completion_racing_lease_expiry_yields_exactly_one_outcome(engine):
    definition = engine.define([task_step("a")])
    outcomes = Counter()
    for stagger in (0, 0.01, 0.03, 0.1):
        engine.start(definition)
        runner_settle()
        claim = engine.claim(lease_seconds=5)
        clock.advance(dt.timedelta(seconds=6))
        completion: list[str] = []

        def complete(claim=claim, completion=completion):
            answer = task_complete(
                identity=engine.identity,
                task_id=claim.task.id,
                command={"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}},
            )
            completion.append("late" if answer.late else "completed")

        def expire(claim=claim, completion=completion, stagger=stagger):
            threading.Event().wait(stagger)  # shifts who reaches the task lock first, so both outcomes occur
            while Attempt.objects.filter(pk=claim.attempt.id, state="RUNNING").exists() and not completion:
                pass_lease_expiry()

        _threads(complete, expire)
        task = Task.objects.get(pk=claim.task.id)
        attempt = Attempt.objects.get(pk=claim.attempt.id)
        events = list(ResultEvent.objects.filter(task=task).order_by("seq").values_list("kind", "late"))
        if completion == ["completed"]:
            assert (task.state, attempt.state, events) == (TaskState.SUCCEEDED, "SUCCEEDED", [("RESULT", False)])
        else:
            # The expiry won: the completion is kept as late evidence after the UNKNOWN event.
            assert completion == ["late"]
            assert (task.state, attempt.state) == (TaskState.NEEDS_REVIEW, "UNKNOWN")
            assert events == [("UNKNOWN", False), ("RESULT", True)]
        outcomes[completion[0]] += 1
    runner_settle()
    assert sum(outcomes.values()) == 4
    assert invariants_check() == []


def test_weave_check_is_clean_after_a_mixed_concurrent_run(engine):
    signal_step = {
        "key": "ok",
        "kind": "SIGNAL",
        "name": "ok",
        "payload_version": "1",
        "deadline_seconds": 600,
        "after": ["a"],
    }
    mixed = engine.define([task_step("a"), task_step("b", after=["a"]), poll_step(), signal_step])
    failing = engine.define([task_step("a", handler="demo.fail", max_attempts=2), task_step("b")])
    instances = [engine.start(mixed, {"pending_rounds": 1}) for _ in range(5)]
    instances += [engine.start(failing, {"retryable": True}) for _ in range(3)]
    stop = threading.Event()

    def runner():
        while not stop.is_set():
            runner_pass()

    def worker(queue):
        def work():
            while not stop.is_set():
                claim = engine.claim(queue)
                if claim is not None:
                    claim_execute(identity=engine.identity, claim=claim)

        return work

    def operator():
        for instance in instances[:5]:
            signal_accept(
                identity=engine.identity,
                instance_id=instance.id,
                command={"name": "ok", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"},
                idempotency_key=f"sig-{instance.id}",
            )
        instance_cancel(
            identity=engine.identity, instance_id=instances[4].id, command={"expected_control_revision": "1"}
        )
        clock.advance(dt.timedelta(seconds=61))
        threading.Event().wait(2)
        stop.set()

    _threads(runner, runner, worker("payments"), worker("polls"), operator)
    runner_settle()
    while engine.work("polls") or engine.work("payments"):
        runner_settle()
    assert invariants_check() == []


def test_runners_and_workers_side_by_side_never_hold_more_permits_than_the_quota(engine):
    """Takes (a conditional increment per row) racing takes and releases: the queue's count never passes its
    maximum, and at every commit it is the number of permits held."""
    engine.queues["payments"].max_active_tasks = 3
    engine.queues["payments"].save(update_fields=["max_active_tasks"])
    definition = engine.define([task_step("a"), task_step("b", after=["a"])])
    instances = [engine.start(definition) for _ in range(8)]
    stop, seen = threading.Event(), []

    def runner():
        while not stop.is_set():
            runner_pass()

    def worker():
        while not stop.is_set():
            claim = engine.claim()
            if claim is not None:
                claim_execute(identity=engine.identity, claim=claim)

    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen.append(Queue.objects.get(pk=engine.queues["payments"].pk).active_tasks)
            if not WorkflowInstance.objects.filter(pk__in=[i.id for i in instances]).exclude(state="SUCCEEDED"):
                break
        stop.set()

    _threads(runner, runner, worker, worker, watch)
    assert set(WorkflowInstance.objects.filter(pk__in=[i.id for i in instances]).values_list("state", flat=True)) == {
        "SUCCEEDED"
    }
    assert max(seen) <= 3 and Task.objects.count() == 16 and Queue.objects.get(name="payments").active_tasks == 0
    assert invariants_check() == []


@pytest.mark.skipif(
    bool(connection.settings_dict.get("NODES")),
    reason="a cluster's row locks are its node's own: SKIP LOCKED does not see a lock taken on another node",
)
def test_skip_locked_passes_over_an_instance_another_transaction_holds(engine):
    instance = engine.start(engine.define([task_step("a")]))
    held, release, seen = threading.Event(), threading.Event(), []

    def holder():
        with transaction.atomic():
            LockSet().lock_one(Level.INSTANCE, instance.id)
            held.set()
            release.wait(10)

    def skipper():
        held.wait(10)
        with transaction.atomic():
            seen.append(LockSet().lock_one(Level.INSTANCE, instance.id, skip_locked=True))
        release.set()

    _threads(holder, skipper)
    assert seen == [None]
    with transaction.atomic():
        assert LockSet().lock_one(Level.INSTANCE, instance.id, skip_locked=True) == instance


def test_concurrent_workers_never_claim_one_task_twice(engine):
    definition = engine.define([task_step("a"), task_step("b"), task_step("c")])
    for _ in range(4):
        engine.start(definition)
    runner_settle()
    claimed: list[str] = []
    lock = threading.Lock()

    def worker():
        while (claim := engine.claim()) is not None:
            with lock:
                claimed.append(claim.task.id)

    _threads(worker, worker, worker)
    assert len(claimed) == 12 and len(set(claimed)) == 12
    assert set(Task.objects.values_list("state", "attempt_count")) == {(TaskState.LEASED, 1)}
    assert Attempt.objects.count() == 12


def _batch_race(engine, *, keys: str, instances: int, limit: int, workers: int) -> tuple[list[str], list[int]]:
    """``workers`` threads claiming ``limit`` tasks per transaction until none is left: (task ids, batch sizes)."""
    definition = engine.define([task_step(key) for key in keys])
    for _ in range(instances):
        engine.start(definition)
    runner_settle()
    claimed, batches, lock = [], [], threading.Lock()
    command = {"worker": "batch", "lease_seconds": 30}

    def worker():
        while claims := task_claim_batch(identity=engine.identity, queue_name="payments", command=command, limit=limit):
            with lock:
                batches.append(len(claims))
                claimed.extend(claim.task.id for claim in claims)

    _threads(*[worker] * workers)
    return claimed, batches


def test_concurrent_batch_claims_never_claim_one_task_twice(engine):
    claimed, batches = _batch_race(engine, keys="abcde", instances=6, limit=4, workers=3)
    assert len(claimed) == 30 and len(set(claimed)) == 30
    assert max(batches) == 4 and min(batches) >= 1
    assert set(Task.objects.values_list("state", "attempt_count")) == {(TaskState.LEASED, 1)}
    assert Attempt.objects.count() == 30
    assert invariants_check() == []


def test_batch_claims_take_only_the_tasks_the_quota_let_exist(engine):
    engine.queues["payments"].max_active_tasks = 5
    engine.queues["payments"].save(update_fields=["max_active_tasks"])
    claimed, _ = _batch_race(engine, keys="abcd", instances=3, limit=10, workers=2)
    assert len(claimed) == 5 and len(set(claimed)) == 5
    engine.queues["payments"].refresh_from_db()
    assert Task.objects.count() == 5 and engine.queues["payments"].active_tasks == 5
    assert invariants_check() == []


def test_concurrent_transitions_of_one_instance_keep_its_event_sequence_gap_free(engine):
    steps = [task_step(key) for key in "abcdef"] + [
        {"key": "ok", "kind": "SIGNAL", "name": "ok", "payload_version": "1", "deadline_seconds": 600}
    ]
    instance = engine.start(engine.define(steps))
    stop = threading.Event()

    def runner():
        while not stop.is_set():
            runner_pass()

    def worker():
        for _ in range(20):
            claim = engine.claim()
            if claim is not None:
                claim_execute(identity=engine.identity, claim=claim)

    def signals():
        for n in range(5):
            signal_accept(
                identity=engine.identity,
                instance_id=instance.id,
                command={"name": "ok", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"},
                idempotency_key=f"sig-{n}",
            )
        threading.Event().wait(1)
        stop.set()

    _threads(runner, runner, worker, worker, worker, signals)
    runner_settle()
    while engine.work():
        runner_settle()
    sequences = list(InstanceEvent.objects.filter(instance_id=instance.id).values_list("sequence", flat=True))
    assert sorted(sequences) == list(range(1, len(sequences) + 1))
    created = Counter(
        InstanceEvent.objects.filter(instance_id=instance.id, kind__endswith=".created").values_list(
            "subject_id", flat=True
        )
    )
    assert set(created.values()) == {1}
    assert WorkflowInstance.objects.get(pk=instance.id).state == "SUCCEEDED"
    assert invariants_check() == []
