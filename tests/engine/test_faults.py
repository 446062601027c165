"""A fault at any write of any runner pass, worker transition or engine service leaves every table as it was.

The runner does not catch a database error per item: each item is one transaction, a failed write rolls it back and
the error leaves the pass (and ``weave_runner``); the item stays due, so the next pass handles it.
"""

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from core import clock
from core.ids import ROOT_STEP_KEY
from engine import runner
from engine.instances import instance_cancel, instance_pause, instance_resume, instance_start
from engine.signaling import signal_accept
from engine.worker import task_complete, task_heartbeat
from history.models import Gate, InboxRecord, Signal, Step, Task, Wait, WorkflowInstance
from testkit import states
from testkit.driver import poll_step, task_step
from tests.engine.test_task_flow import _review_task, _second_activation
from tests.recovery.digest import FaultAt, history_digest


@dataclass(frozen=True)
class Transition:
    name: str
    build: Callable[[Any], Any]  # engine → what ``run`` needs
    run: Callable[[Any, Any], Any]  # (engine, built) → truthy when it did its work
    expect: dict  # part of the tables' summary after it ran: proves the state was built for this path


def _pass(name, build, run_pass, **expect):
    return Transition(name, build, lambda engine, built: run_pass(), expect)


def _summary() -> dict[str, list]:
    """The states the transitions change, table by table (steps without ``$root``)."""
    rows = {
        "instances": WorkflowInstance.objects.values_list("state", flat=True),
        "gates": Gate.objects.values_list("open", flat=True),
        "steps": Step.objects.exclude(key=ROOT_STEP_KEY).values_list("key", "state"),
        "records": InboxRecord.objects.values_list("state", "disposition"),
        "signals": Signal.objects.values_list("state", "disposition"),
        "waits": Wait.objects.values_list("state", flat=True),
        "tasks": Task.objects.values_list("state", flat=True),
    }
    return {name: sorted(query) for name, query in rows.items()}


def _then(*steps):
    """A build running ``steps`` in order, each given the engine; returns the first one's value."""

    def build(engine):
        first, *rest = steps
        value = first(engine)
        for step in rest:
            step(engine)
        return value

    return build


def _settle(engine):
    runner.runner_settle()


def _advance(seconds):
    return lambda engine: clock.advance(dt.timedelta(seconds=seconds))


def _late_result(engine):
    """A result of activation 1 after the step moved on to activation 2 (what RetryStep leaves)."""
    instance = _running(engine)
    claim = engine.claim()
    _second_activation(engine.reload(instance), "a")
    _complete(engine, claim, "SUCCEEDED", {"paid": True})


def _reviewed_result(engine):
    states.leases_expired(engine)
    runner.runner_settle()
    _review_task(Task.objects.get(), "SUCCEEDED", '{"paid":true}')


def _orphan_result(engine):
    instance = states.results_pending(engine)[0]
    WorkflowInstance.objects.filter(pk=instance.id).delete()


def _queue_moved(engine):
    states.results_pending(engine)
    Task.objects.update(queue=engine.queues["polls"])


def _complete(engine, claim, outcome, result, retryable=False):
    command = {"attempt_id": claim.attempt.id, "outcome": outcome, "result": result, "retryable": retryable}
    return task_complete(identity=engine.identity, task_id=claim.task.id, command=command)


def _claimed(engine, **task):
    _running(engine, **task)
    return engine.claim()


def _control(service, **command):
    def run(engine, instance):
        revision = WorkflowInstance.objects.get(pk=instance.id).control_revision
        command_with_revision = {"expected_control_revision": str(revision), **command}
        return service(identity=engine.identity, instance_id=instance.id, command=command_with_revision)

    return run


def _running(engine, **task):
    """One instance whose TASK step ``a`` is active, its task QUEUED."""
    instance = states.started(engine, 1, [task_step("a", **task)])[0]
    runner.runner_settle()
    return instance


def _paused(engine):
    instance = _running(engine)
    _control(instance_pause)(engine, instance)
    return instance


CONTRACT = {"type": "object", "required": ["paid"]}
SIGNAL_AFTER_TASK = [task_step("a"), {**states.SIGNAL, "after": ["a"]}]

CONSUMED = "CONSUMED"
TRANSITIONS = [
    _pass("continuations: activate a TASK step", states.started, runner.pass_continuations, tasks=["QUEUED"]),
    _pass(
        "continuations: activate a POLL step",
        lambda e: states.started(e, 1, [poll_step()]),
        runner.pass_continuations,
        steps=[("settle", "ACTIVE")],
        tasks=["QUEUED"],
    ),
    _pass(
        "continuations: activate a SIGNAL step",
        lambda e: states.started(e, 1, [states.SIGNAL]),
        runner.pass_continuations,
        waits=["WAITING"],
    ),
    _pass(
        "continuations: activate a TIMER step",
        lambda e: states.started(e, 1, [states.TIMER]),
        runner.pass_continuations,
        waits=["WAITING"],
    ),
    _pass(
        "continuations: finish the instance",
        _then(states.timers_due, lambda e: runner.pass_timers()),
        runner.pass_continuations,
        instances=["SUCCEEDED"],
    ),
    _pass(
        "inbox: TASK result applied",
        states.results_pending,
        runner.pass_inbox,
        steps=[("a", "SUCCEEDED")],
        records=[(CONSUMED, "APPLIED")],
    ),
    _pass(
        "inbox: TASK failure puts the step in review",
        lambda e: states.results_pending(e, 1, [task_step("a", handler="demo.fail")]),
        runner.pass_inbox,
        instances=["NEEDS_REVIEW"],
        steps=[("a", "FAILED")],
    ),
    _pass(
        "inbox: TASK result breaks its contract",
        lambda e: states.results_pending(e, 1, [task_step("a", contract=CONTRACT)], {"other": 1}),
        runner.pass_inbox,
        records=[(CONSUMED, "CONTRACT_VIOLATION")],
    ),
    _pass(
        "inbox: UNKNOWN event of an expired lease",
        _then(states.leases_expired, lambda e: runner.pass_lease_expiry()),
        runner.pass_inbox,
        instances=["NEEDS_REVIEW"],
        steps=[("a", "NEEDS_REVIEW")],
    ),
    _pass(
        "inbox: REVIEWED event recorded",
        _reviewed_result,
        runner.pass_inbox,
        records=[(CONSUMED, "APPLIED"), (CONSUMED, "APPLIED")],
    ),
    _pass("inbox: late result only recorded", _late_result, runner.pass_inbox, records=[(CONSUMED, "LATE_RECORDED")]),
    _pass(
        "inbox: record off its fixed queue quarantined",
        _queue_moved,
        runner.pass_inbox,
        instances=["NEEDS_REVIEW"],
        records=[("QUARANTINED", "")],
    ),
    _pass(
        "inbox: records of a missing instance quarantined",
        _orphan_result,
        runner.pass_inbox,
        records=[("QUARANTINED", "")],
    ),
    _pass(
        "inbox: POLL answer PENDING schedules the next round",
        lambda e: states.results_pending(e, 1, [poll_step()], {"pending_rounds": 5}, queue="polls"),
        runner.pass_inbox,
        steps=[("settle", "WAITING")],
    ),
    _pass(
        "inbox: POLL answer done succeeds the step",
        lambda e: states.results_pending(e, 1, [poll_step()], queue="polls"),
        runner.pass_inbox,
        steps=[("settle", "SUCCEEDED")],
    ),
    _pass(
        "inbox: signal satisfies its wait",
        states.signals_sent,
        runner.pass_inbox,
        signals=[(CONSUMED, "APPLIED")],
        waits=["SATISFIED"],
    ),
    _pass(
        "inbox: signal of another version rejected",
        lambda e: states.signals_sent(e, payload_version="2"),
        runner.pass_inbox,
        signals=[("REJECTED", "REJECTED")],
        waits=["WAITING"],
    ),
    _pass(
        "inbox: signal breaking the contract",
        lambda e: states.signals_sent(e, 1, [{**states.SIGNAL, "contract": CONTRACT}]),
        runner.pass_inbox,
        signals=[("REJECTED", "CONTRACT_VIOLATION")],
        waits=["NEEDS_REVIEW"],
    ),
    _pass(
        "inbox: early signal buffered",
        lambda e: states.signals_sent(e, 1, SIGNAL_AFTER_TASK),
        runner.pass_inbox,
        records=[(CONSUMED, "BUFFERED")],
        signals=[("PENDING", "")],
    ),
    _pass(
        "inbox: a result opens a signal wait that takes its buffered signal",
        _then(
            lambda e: states.signals_sent(e, 1, SIGNAL_AFTER_TASK),
            lambda e: runner.pass_inbox(),
            lambda e: e.work(),
        ),
        runner.pass_inbox,
        instances=["SUCCEEDED"],
        signals=[(CONSUMED, "APPLIED")],
        waits=["SATISFIED"],
    ),
    _pass(
        "signal expiry: a buffered signal past its TTL",
        _then(
            lambda e: states.signals_sent(e, 1, [task_step("a"), {**SIGNAL_AFTER_TASK[1], "signal_ttl_seconds": 1}]),
            _settle,
            _advance(2),
        ),
        runner.pass_signal_expiry,
        signals=[("EXPIRED", "EXPIRED")],
    ),
    _pass("lease expiry: attempt UNKNOWN", states.leases_expired, runner.pass_lease_expiry, tasks=["NEEDS_REVIEW"]),
    _pass(
        "task deadline: a QUEUED task past its latest start fails",
        _then(lambda e: states.started(e, 1, [task_step("a", latest_start_seconds=1)]), _settle, _advance(2)),
        runner.pass_task_deadlines,
        tasks=["FAILED"],
        records=[("PENDING", "")],
    ),
    _pass(
        "poll rounds: open the next round",
        states.poll_rounds_due,
        runner.pass_poll_rounds,
        steps=[("settle", "ACTIVE")],
        tasks=["QUEUED", "SUCCEEDED"],
    ),
    _pass(
        "poll rounds: past the poll deadline enters review",
        _then(lambda e: states.poll_rounds_due(e, poll_deadline_seconds=120), _advance(60)),
        runner.pass_poll_rounds,
        instances=["NEEDS_REVIEW"],
        steps=[("settle", "NEEDS_REVIEW")],
    ),
    _pass(
        "timers: a due timer fires",
        states.timers_due,
        runner.pass_timers,
        steps=[("t", "SUCCEEDED")],
        waits=["SATISFIED"],
    ),
    _pass(
        "timers: a timer first seen too late enters review",
        lambda e: states.timers_due(e, max_lateness_seconds=1),
        runner.pass_timers,
        instances=["NEEDS_REVIEW"],
        waits=["NEEDS_REVIEW"],
    ),
    _pass(
        "wait deadline: the wait expires",
        states.waits_late,
        runner.pass_wait_deadlines,
        instances=["NEEDS_REVIEW"],
        waits=["EXPIRED"],
    ),
    _pass(
        "instance deadline: RUNNING → CANCELLING",
        states.instances_late,
        runner.pass_instance_deadlines,
        instances=["CANCELLING"],
    ),
    _pass(
        "stop settlement: cancel a queued task and settle CANCELLED",
        states.instances_cancelled,
        runner.pass_stop_settlement,
        instances=["CANCELLED"],
        tasks=["CANCELLED"],
    ),
    _pass(
        "stop settlement: settle FAILED after the instance deadline",
        _then(states.instances_late, lambda e: runner.pass_instance_deadlines()),
        runner.pass_stop_settlement,
        instances=["FAILED"],
        tasks=["CANCELLED"],
    ),
    Transition("worker: claim", _running, lambda engine, built: engine.claim(), {"tasks": ["LEASED"]}),
    Transition(
        "worker: heartbeat",
        _claimed,
        lambda engine, claim: task_heartbeat(
            identity=engine.identity,
            task_id=claim.task.id,
            command={"attempt_id": claim.attempt.id, "lease_seconds": 60},
        ),
        {"tasks": ["LEASED"]},
    ),
    Transition(
        "worker: complete SUCCEEDED",
        _claimed,
        lambda e, claim: _complete(e, claim, "SUCCEEDED", {"ok": 1}),
        {"tasks": ["SUCCEEDED"], "records": [("PENDING", "")]},
    ),
    Transition(
        "worker: retryable failure requeues",
        lambda e: _claimed(e, max_attempts=3),
        lambda e, claim: _complete(e, claim, "FAILED", {"error": "x"}, retryable=True),
        {"tasks": ["QUEUED"], "records": []},
    ),
    Transition(
        "worker: terminal failure",
        _claimed,
        lambda e, claim: _complete(e, claim, "FAILED", {"error": "x"}),
        {"tasks": ["FAILED"], "records": [("PENDING", "")]},
    ),
    Transition(
        "service: start",
        lambda e: e.define(states.TASKS),
        lambda e, definition: instance_start(
            identity=e.identity, command={"definition": definition.name, "input": {}}, idempotency_key="start"
        ),
        {"instances": ["RUNNING"], "steps": [("a", "PENDING")]},
    ),
    Transition(
        "service: accept a signal",
        _then(lambda e: states.started(e, 1, [states.SIGNAL])[0], _settle),
        lambda e, instance: signal_accept(
            identity=e.identity,
            instance_id=instance.id,
            command={"name": "go", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"},
            idempotency_key="signal",
        ),
        {"signals": [("PENDING", "")], "records": [("PENDING", "")]},
    ),
    Transition("service: pause", _running, _control(instance_pause), {"instances": ["RUNNING"], "gates": [False]}),
    Transition("service: resume", _paused, _control(instance_resume), {"instances": ["RUNNING"], "gates": [True]}),
    Transition(
        "service: cancel",
        _running,
        _control(instance_cancel, reason="no longer needed"),
        {"instances": ["CANCELLING"], "gates": [False]},
    ),
]


def _counted(run) -> tuple[Any, list[str]]:
    fault = FaultAt(0)
    with connection.execute_wrapper(fault):
        return run(), fault.writes


@pytest.mark.django_db
@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_a_fault_at_each_write_leaves_every_table_unchanged_and_the_transition_still_runs(
    engine, transition, reliability_report
):
    built = transition.build(engine)
    before = history_digest()
    # Each try runs in a savepoint rolled back afterwards: the next one starts from the built state again.
    with transaction.atomic():
        done, writes = _counted(lambda: transition.run(engine, built))
        summary = _summary()
        transaction.set_rollback(True)
    assert done, f"{transition.name} did nothing on the state built for it"
    assert {table: summary[table] for table in transition.expect} == transition.expect
    assert writes and history_digest() == before
    for n in range(1, len(writes) + 1):
        with transaction.atomic():
            with (
                pytest.raises(DatabaseError, match=f"injected fault at write {n}$"),
                connection.execute_wrapper(FaultAt(n)),
            ):
                transition.run(engine, built)
            assert history_digest() == before, (transition.name, n, writes[n - 1])
            again, rewrites = _counted(lambda: transition.run(engine, built))
            assert again and rewrites == writes, (transition.name, n)
            transaction.set_rollback(True)
            reliability_report("faults injected, every table restored", {"engine writes": 1})


COMMITTED = (
    "continuations: activate a TASK step",
    "inbox: TASK result applied",
    "inbox: signal satisfies its wait",
    "stop settlement: cancel a queued task and settle CANCELLED",
    "worker: complete SUCCEEDED",
    "service: start",
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="a committed-mode rollback is what MariaDB must prove")
@pytest.mark.parametrize("transition", [t for t in TRANSITIONS if t.name in COMMITTED], ids=COMMITTED)
def test_a_fault_at_each_write_rolls_back_a_committed_transition(engine, transition):
    built = transition.build(engine)
    with transaction.atomic():
        _, writes = _counted(lambda: transition.run(engine, built))
        transaction.set_rollback(True)
    before = history_digest()
    # Autocommit: a failed transaction leaves the state as built, so the same state takes every fault.
    for n in range(1, len(writes) + 1):
        with (
            pytest.raises(DatabaseError, match=f"injected fault at write {n}$"),
            connection.execute_wrapper(FaultAt(n)),
        ):
            transition.run(engine, built)
        assert history_digest() == before, (transition.name, n, writes[n - 1])
    done, rewrites = _counted(lambda: transition.run(engine, built))
    assert done and rewrites == writes
    assert history_digest() != before
