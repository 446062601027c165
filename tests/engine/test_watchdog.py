"""The no-progress watchdog: each reason reached by the engine's own paths, marked, and cleared once the instance
moves; it never changes the engine's rows."""

import datetime as dt

import pytest
from django.test import override_settings

from core import clock
from core.errors import InvalidArgument
from core.identity import Identity
from engine import runner
from engine.background import ProcessBeat
from engine.instances import instance_pause, instance_resume
from engine.signaling import signal_accept
from engine.watchdog import pass_watchdog
from engine.worker import task_complete
from history.models import (
    Attempt,
    ProcessKind,
    Scope,
    Stall,
    StallReason,
    Task,
    TaskState,
    Wait,
    WorkflowInstance,
)
from recovery.operations import instance_continue
from testkit.driver import task_step
from testkit.states import task_resolved_state, task_unknown_state
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

HOUR = dt.timedelta(hours=1)


def _control(engine, service, instance) -> None:
    instance.refresh_from_db()
    command = {"expected_control_revision": str(instance.control_revision), "reason": "maintenance window"}
    service(identity=engine.identity, instance_id=instance.id, command=command)


def _operator(instance) -> Identity:
    scopes = frozenset({Scope.RECOVER, Scope.CONTROL, Scope.READ})
    return Identity(namespace_id=instance.namespace_id, actor_id="d" * 32, scopes=scopes, queues=None)


def _marks() -> dict[str, str]:
    return dict(Stall.objects.values_list("instance_id", "reason"))


def _started(engine):
    instance = engine.start(engine.define([task_step("charge")]))
    runner.runner_settle()
    return instance


@override_settings(WEAVE_STALL_PAUSED_SECONDS=3600)
def test_an_instance_paused_past_the_bound_is_marked_and_cleared_by_its_resume(engine):
    # A live worker serves payments: resumed, the instance's task is claimable and someone takes from its queue.
    ProcessBeat(ProcessKind.WORKER, queue="payments", namespace_id=engine.namespace.id).start()
    with clock.moved(-2 * HOUR):
        paused = _started(engine)
        _control(engine, instance_pause, paused)
        other = _started(engine)
        _control(engine, instance_pause, other)
    # Paused just now: within the bound (no runner pass here: the runner's own watchdog pass would mark the others).
    _control(engine, instance_pause, engine.start(engine.define([task_step("charge")])))
    before = history_digest(excluding=(Stall,))
    assert pass_watchdog() == 2
    assert _marks() == {paused.id: StallReason.PAUSED_TOO_LONG, other.id: StallReason.PAUSED_TOO_LONG}
    assert history_digest(excluding=(Stall,)) == before  # marks only: the engine's rows are as they were
    assert pass_watchdog() == 0  # nothing new: a settled runner settles
    _control(engine, instance_resume, paused)
    assert pass_watchdog() == 1 and _marks() == {other.id: StallReason.PAUSED_TOO_LONG}
    runner.runner_settle()  # the runner's own pass keeps the marks as they are
    assert _marks() == {other.id: StallReason.PAUSED_TOO_LONG}


@override_settings(WEAVE_STALL_WAITING_SECONDS=300)
def test_a_result_the_runner_has_not_taken_in_is_marked_until_it_does(engine):
    with clock.moved(-HOUR):
        instance = _started(engine)
        claim = engine.claim()
        command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}}
        task_complete(identity=engine.identity, task_id=claim.task.id, command=command)
    assert pass_watchdog() == 1
    stall = Stall.objects.get()
    assert (stall.instance_id, stall.reason) == (instance.id, StallReason.INBOX_WAITING)
    assert "inbox record has waited for the runner since" in stall.detail
    assert stall.revision == WorkflowInstance.objects.get(pk=instance.id).revision
    runner.pass_inbox()  # the runner takes the result in: the instance moves
    assert pass_watchdog() == 1 and _marks() == {}


@override_settings(WEAVE_STALL_WAITING_SECONDS=300)
def test_a_continuation_the_runner_has_not_applied_is_marked_until_it_does(tenancy):
    with clock.moved(-HOUR):
        state = task_resolved_state(tenancy)
        instance = state.instance
        instance.refresh_from_db()
        command = {
            "expected_revision": str(instance.revision),
            "reason": "resolved",
            "evidence_ref": "ticket:OPS-1",
            "review_resolved": True,
        }
        instance_continue(identity=_operator(instance), instance_id=instance.id, idempotency_key="c", command=command)
    assert pass_watchdog() == 1  # Continue left the instance RUNNING with a continuation for the runner
    assert _marks() == {instance.id: StallReason.CONTINUATION_WAITING}
    runner.runner_settle()  # the continuations pass applies it, then the watchdog clears the mark
    assert _marks() == {}


@override_settings(WEAVE_STALL_PAUSED_SECONDS=3600)
def test_an_instance_in_review_is_never_marked(tenancy):
    with clock.moved(-2 * HOUR):
        instance = task_unknown_state(tenancy).instance
        instance.refresh_from_db()
        command = {"expected_control_revision": str(instance.control_revision), "reason": "maintenance window"}
        instance_pause(identity=_operator(instance), instance_id=instance.id, command=command)
    assert WorkflowInstance.objects.get(pk=instance.id).paused
    assert pass_watchdog() == 0 and _marks() == {}


def _failed_attempt(engine, error: str, queue: str = "payments") -> None:
    claim = engine.claim(queue)
    command = {"attempt_id": claim.attempt.id, "outcome": "FAILED", "result": {"error": error}, "retryable": True}
    task_complete(identity=engine.identity, task_id=claim.task.id, command=command)
    runner.runner_settle()


@override_settings(WEAVE_STALL_RETRIES=3)
def test_a_task_failing_the_same_way_attempt_after_attempt_is_marked_until_an_attempt_succeeds(engine):
    instance = engine.start(engine.define([task_step("charge", max_attempts=10)]))
    other = engine.start(engine.define([task_step("charge", max_attempts=10, queue="polls")]))
    runner.runner_settle()
    for number in range(3):  # the same failure, its ids and amounts aside
        _failed_attempt(engine, f"card 42{number}7 declined: amount {number * 10}.50")
    # The other instance's task failed three times too, each time differently: retrying may yet help.
    for error in ("card declined", "gateway timeout", "insufficient funds"):
        _failed_attempt(engine, error, queue="polls")
    task = Task.objects.get(source_instance=instance)
    assert (task.state, task.attempt_count) == (TaskState.QUEUED, 3)  # retried: not in review
    # The runner's own watchdog pass, after the third failure, marked it.
    assert _marks() == {instance.id: StallReason.RETRYING_SAME_FAILURE}
    Stall.objects.all().delete()
    before = history_digest(excluding=(Stall,))
    assert pass_watchdog() == 1 and _marks() == {instance.id: StallReason.RETRYING_SAME_FAILURE}
    assert history_digest(excluding=(Stall,)) == before
    stall = Stall.objects.get()
    assert (
        stall.detail == f'task {task.id} failed 3 attempts in a row with {{"error": "card <*> declined: amount <*>"}}'
    )
    assert stall.since == Attempt.objects.get(task=task, number=1).finished_at
    assert pass_watchdog() == 0  # still the same: the mark stays
    claim = engine.claim()
    assert claim.task.id == task.id
    command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}}
    task_complete(identity=engine.identity, task_id=claim.task.id, command=command)
    runner.runner_settle()  # the runner's own watchdog pass clears the mark
    assert _marks() == {} and WorkflowInstance.objects.get(pk=instance.id).state == "SUCCEEDED"
    assert other.id not in _marks()


@override_settings(WEAVE_STALL_WAITING_SECONDS=300)
def test_a_task_on_a_queue_nobody_takes_from_is_marked_until_a_worker_claims_it(engine):
    with clock.moved(-HOUR):
        instance = _started(engine)  # its task queued on payments, which no worker serves
        served = engine.start(engine.define([task_step("charge", queue="polls")]))
        runner.runner_settle()
    ProcessBeat(ProcessKind.WORKER, queue="polls", namespace_id=engine.namespace.id).start()  # a live weave_worker
    _started(engine)  # queued just now, within the bound; the runner's own watchdog pass marks the first
    assert _marks() == {instance.id: StallReason.UNCLAIMED}
    Stall.objects.all().delete()
    before = history_digest(excluding=(Stall,))
    assert pass_watchdog() == 1
    stall = Stall.objects.get()
    task = Task.objects.get(source_instance=instance)
    assert (stall.instance_id, stall.reason, stall.since) == (instance.id, StallReason.UNCLAIMED, task.updated_at)
    assert stall.detail.startswith(f"task {task.id} queued on payments since ")
    assert stall.detail.endswith("no worker takes from payments")
    assert history_digest(excluding=(Stall,)) == before
    assert served.id not in _marks()
    engine.work()  # a worker of the task API claims from payments at last: the instance moves
    assert pass_watchdog() == 1 and _marks() == {}


@override_settings(WEAVE_STALL_WAITING_SECONDS=300)
def test_a_task_api_worker_holding_a_lease_on_the_queue_keeps_its_queued_tasks_unmarked(engine):
    with clock.moved(-HOUR):
        waiting, working = _started(engine), _started(engine)
    engine.claim()  # the oldest goes to a worker that has no process row: the queue is being taken from
    assert Task.objects.filter(state=TaskState.LEASED).count() == 1
    assert pass_watchdog() == 0 and _marks() == {}
    assert {waiting.id, working.id} == set(WorkflowInstance.objects.values_list("id", flat=True))


def _signal_step(**extra) -> dict:
    step = {"key": "paid", "kind": "SIGNAL", "name": "paid", "payload_version": "1", "deadline_seconds": 7200}
    return {**step, **extra}


def test_a_signal_later_than_its_definition_expects_is_marked_until_it_arrives(engine):
    with clock.moved(-HOUR):
        late = engine.start(engine.define([_signal_step(expected_seconds=600)]), business_key="late")
        engine.start(engine.define([_signal_step()]), business_key="no-expectation")
        engine.start(engine.define([_signal_step(expected_seconds=5400)]), business_key="not-yet")
        runner.runner_settle()
    wait = Wait.objects.get(instance=late)
    assert wait.expected_at == wait.created_at + dt.timedelta(seconds=600)
    before = history_digest(excluding=(Stall,))
    assert pass_watchdog() == 1
    stall = Stall.objects.get()
    assert (stall.instance_id, stall.reason, stall.since) == (late.id, StallReason.SIGNAL_OVERDUE, wait.expected_at)
    assert stall.detail.startswith("signal paid expected by ") and "not in; its deadline is" in stall.detail
    assert history_digest(excluding=(Stall,)) == before
    signal_accept(
        identity=engine.identity,
        instance_id=late.id,
        command={
            "name": "paid",
            "payload_version": "1",
            "payload": {},
            "correlation_key": "late",
            "reason": "paid at last",
        },
        idempotency_key="paid",
    )
    runner.runner_settle()  # the runner takes the signal in (the instance moves), then its watchdog clears the mark
    assert WorkflowInstance.objects.get(pk=late.id).state == "SUCCEEDED" and _marks() == {}


def test_a_definition_expecting_a_signal_after_its_deadline_is_refused_naming_the_field(engine):
    with pytest.raises(InvalidArgument) as refused:
        engine.define([_signal_step(expected_seconds=7201)])
    assert refused.value.field == "steps[0].expected_seconds"
    assert "between 1 and 7200" in str(refused.value)
