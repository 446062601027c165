"""The transitions the operator's recovery composes, each driven on a state the engine itself produced."""

import datetime as dt

import pytest
from django.db import transaction

from core import clock
from engine.activation import activation_retry, activation_superseded_state, wait_supersede
from engine.advance import continuation_create
from engine.budget import Budget, attempt_budget, attempts_left, link_max_attempts
from engine.poll import poll_round_await
from engine.state import instance_control_touch, instance_review_lift, step_conclude, step_enter_review, touch
from engine.worker import task_settle_reviewed
from history.locking import Level, LockSet
from history.models import (
    Activation,
    ActivationState,
    Application,
    Attempt,
    AttemptState,
    Continuation,
    Gate,
    InstanceState,
    PollRound,
    ReviewCause,
    Step,
    StepState,
    Task,
    TaskState,
    Wait,
    WaitState,
    WorkflowInstance,
)
from testkit.driver import poll_step, task_step
from testkit.states import SIGNAL


def _failed_task_step(engine, max_attempts=3):
    """A TASK step whose only task failed for good: the instance is in review, the permit given back."""
    instance = engine.start(engine.define([task_step("a", handler="demo.fail", max_attempts=max_attempts)]))
    engine.settle()
    engine.work()
    engine.settle()
    return WorkflowInstance.objects.get(pk=instance.pk), Step.objects.get(instance=instance, key="a")


def _lost_lease(engine):
    """A task whose lease expired: NEEDS_REVIEW, an UNKNOWN attempt, its permit still held."""
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim(lease_seconds=1)
    clock.advance(dt.timedelta(seconds=2))
    engine.settle()
    return WorkflowInstance.objects.get(pk=instance.pk), Task.objects.get(pk=claim.task.id)


def test_touch_with_changes_writes_only_them_and_advances_the_revision(engine):
    instance, step = _failed_task_step(engine)
    step.output = '{"not": "saved"}'
    touch(step, clock.now(), state=StepState.CANCELLED)
    stored = Step.objects.get(pk=step.pk)
    assert (stored.state, stored.revision, stored.output) == (StepState.CANCELLED, step.revision, None)


def test_lifting_review_to_running_opens_the_gate_unless_paused_and_to_cancelling_keeps_it_shut(engine):
    instance, _ = _failed_task_step(engine)
    gate = Gate.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.NEEDS_REVIEW and not gate.open and instance.review_reason
    revisions = (instance.revision, instance.control_revision)
    with transaction.atomic():
        instance_review_lift(instance=instance, gate=gate, state=InstanceState.RUNNING, stop_kind=None, stop_reason="")
        instance_control_touch(instance=instance, now=clock.now())
    stored = WorkflowInstance.objects.get(pk=instance.pk)
    assert (stored.state, stored.review_reason, Gate.objects.get(pk=instance.pk).open) == ("RUNNING", "", True)
    assert (stored.review_cause, stored.review_step_key, stored.review_since) == ("", "", None)
    assert (stored.revision, stored.control_revision) == (revisions[0] + 1, revisions[1] + 1)

    paused, _ = _failed_task_step(engine)
    paused.paused = True
    gate = Gate.objects.get(pk=paused.pk)
    instance_review_lift(instance=paused, gate=gate, state=InstanceState.RUNNING, stop_kind=None, stop_reason="")
    assert not Gate.objects.get(pk=paused.pk).open

    stopped, _ = _failed_task_step(engine)
    gate = Gate.objects.get(pk=stopped.pk)
    instance_review_lift(
        instance=stopped, gate=gate, state=InstanceState.CANCELLING, stop_kind="FAIL", stop_reason="step 'a' failed"
    )
    assert (stopped.state, stopped.stop_kind, gate.open) == ("CANCELLING", "FAIL", False)


def test_only_an_instance_in_review_is_lifted(engine):
    instance = engine.start(engine.define([task_step("a")]))
    gate = Gate.objects.get(pk=instance.pk)
    with pytest.raises(AssertionError):
        instance_review_lift(instance=instance, gate=gate, state=InstanceState.RUNNING, stop_kind=None, stop_reason="")


def test_a_step_entering_review_takes_its_activation_along_and_closes_the_gate(engine):
    for failed, state in ((False, "NEEDS_REVIEW"), (True, "FAILED")):
        instance = engine.start(engine.define([task_step("a")]))
        engine.settle()
        gate = Gate.objects.get(pk=instance.pk)
        step = Step.objects.get(instance=instance, key="a")
        activation = Activation.objects.get(step=step)
        now = clock.now()
        step_enter_review(
            instance=instance,
            gate=gate,
            step=step,
            activation=activation,
            reason="why",
            cause=ReviewCause.TASK_OUTCOME_UNKNOWN,
            now=now,
            failed=failed,
        )
        assert (step.state, activation.state) == (state, state)
        assert (instance.state, instance.review_reason) == ("NEEDS_REVIEW", "why")
        assert (instance.review_cause, instance.review_step_key, instance.review_since) == (
            "task_outcome_unknown",
            "a",
            now,
        )
        assert not Gate.objects.get(pk=instance.pk).open  # the gate is saved; the caller saves the rest
        assert Step.objects.get(pk=step.pk).state == "ACTIVE"


def test_an_operators_conclusion_ends_step_and_activation_keeping_the_completion_time(engine):
    instance, step = _failed_task_step(engine)
    activation = Activation.objects.get(pk=step.current_activation_id)
    completed, revisions = activation.completed_at, (step.revision, activation.revision)
    resolution = {"conclusion": "SUCCEEDED", "operation_id": "op"}
    with transaction.atomic(), clock.moved(dt.timedelta(seconds=5)):
        now = clock.now()
        step_conclude(
            step=step, activation=activation, conclusion="SUCCEEDED", output="{}", resolution=resolution, now=now
        )
    step, activation = Step.objects.get(pk=step.pk), Activation.objects.get(pk=activation.pk)
    assert (step.state, step.output, step.resolution) == ("SUCCEEDED", "{}", resolution)
    assert step.revision == revisions[0] + 1
    assert (activation.state, activation.output, activation.resolution) == ("SUCCEEDED", "{}", resolution)
    assert (activation.completed_at, activation.revision) == (completed, revisions[1] + 1)
    assert WorkflowInstance.objects.get(pk=instance.pk).state == "NEEDS_REVIEW"


def test_a_confirmed_pending_waits_again_for_the_next_round_without_a_new_query(engine):
    instance = engine.start(engine.define([poll_step(max_rounds=2, interval_seconds=60)]), {"pending_rounds": 1})
    engine.settle()
    engine.work("polls")
    engine.settle()
    step = Step.objects.get(instance=instance, key="settle")
    activation = Activation.objects.get(pk=step.current_activation_id)
    with transaction.atomic():
        step_enter_review(
            instance=instance,
            gate=Gate.objects.get(pk=instance.pk),
            step=step,
            activation=activation,
            reason="why",
            cause=ReviewCause.POLL_EXHAUSTED,
            now=clock.now(),
        )
    due_at, revisions = activation.next_round_at, (step.revision, activation.revision)
    with transaction.atomic():
        poll_round_await(step=step, activation=activation, due_at=due_at, now=clock.now())
    step, activation = Step.objects.get(pk=step.pk), Activation.objects.get(pk=activation.pk)
    assert (step.state, step.revision) == ("WAITING", revisions[0] + 1)
    assert (activation.state, activation.next_round_at, activation.revision) == ("WAITING", due_at, revisions[1] + 1)
    assert PollRound.objects.filter(activation=activation).count() == 1


def test_a_continuation_is_returned_with_the_callers_time(engine):
    instance, _ = _failed_task_step(engine)
    at = clock.now() - dt.timedelta(seconds=5)
    made = continuation_create(instance=instance, kind="CONTINUE", now=at)
    stored = Continuation.objects.get(pk=made.pk)
    assert (stored.kind, stored.step_key, stored.created_at, stored.state) == ("CONTINUE", "$root", at, "PENDING")


def test_a_wait_is_superseded_by_its_next_generation_with_the_same_contract_and_deadlines(engine):
    instance = engine.start(engine.define([SIGNAL]), {"order": "o-1"})
    engine.settle()
    step = Step.objects.get(instance=instance, key="s")
    old_activation = Activation.objects.get(pk=step.current_activation_id)
    old_wait = Wait.objects.get(pk=old_activation.wait_id)
    now = clock.now()
    with transaction.atomic():
        activation, wait, taken = wait_supersede(
            instance=instance,
            gate=Gate.objects.get(pk=instance.pk),
            step=step,
            activation=old_activation,
            wait=old_wait,
            step_spec=instance.definition.step_spec("s"),
            now=now,
        )
    assert taken is None
    activation, wait = Activation.objects.get(pk=activation.pk), Wait.objects.get(pk=wait.pk)
    assert (activation.sequence, activation.state, activation.wait_id) == (2, ActivationState.WAITING, wait.id)
    assert (wait.generation, wait.state, wait.activation_id) == (2, WaitState.WAITING, activation.id)
    kept = ("kind", "signal_name", "payload_version", "correlation_key", "deadline_at", "fire_at")
    assert [getattr(wait, name) for name in kept] == [getattr(old_wait, name) for name in kept]
    assert Wait.objects.get(pk=old_wait.pk).state == WaitState.SUPERSEDED
    assert Activation.objects.get(pk=old_activation.pk).state == ActivationState.SUPERSEDED
    step = Step.objects.get(pk=step.pk)
    assert (step.state, step.current_activation_id) == (StepState.WAITING, activation.id)


def _retry(engine, instance, step, remaining, queue="payments", business_round=None):
    locks = LockSet()
    previous = Task.objects.get(source_activation_id=step.current_activation_id)
    locks.lock_one(Level.INSTANCE, instance.pk)
    step = locks.lock_one(Level.STEP, step.pk)
    current = locks.lock_one(Level.ACTIVATION, step.current_activation_id)
    application = locks.lock_one(Level.APPLICATION, previous.application_id)
    queue = locks.lock_queues(instance.namespace_id, [queue])[queue]
    return activation_retry(
        locks=locks,
        application=application,
        queue=queue,
        instance=instance,
        step=step,
        spec=instance.definition.step_spec(step.key),
        current=current,
        first=current,
        previous=previous,
        original=previous,
        max_attempts=remaining,
        business_round=business_round,
        attempts_used=previous.attempt_count,
        now=clock.now(),
    )


def test_a_retry_inherits_the_task_and_its_deadlines_and_takes_a_permit(engine, quota_rows):
    instance, step = _failed_task_step(engine)
    previous = Task.objects.get(source_activation_id=step.current_activation_id)
    with transaction.atomic():
        activation, task = _retry(engine, instance, step, remaining=2)
    activation, task = Activation.objects.get(pk=activation.pk), Task.objects.get(pk=task.pk)
    assert (activation.sequence, activation.state, activation.task_id) == (2, ActivationState.ACTIVE, task.id)
    inherited = ("handler", "queue_id", "application_id", "priority", "input", "business_key", "deadline_at")
    assert [getattr(task, name) for name in inherited] == [getattr(previous, name) for name in inherited]
    assert (task.state, task.max_attempts, task.retry_of_id, task.permit_held) == ("QUEUED", 2, previous.id, True)
    # The failed activation keeps its end; the step runs on the new one.
    assert Activation.objects.get(pk=previous.source_activation_id).state == ActivationState.FAILED
    assert Step.objects.get(pk=step.pk).current_activation_id == activation.id
    application, queues = quota_rows()
    assert application.active_tasks == 1 == queues["payments"].active_tasks
    assert not PollRound.objects.exists()


def test_a_retry_against_a_full_quota_writes_nothing(engine, quota_rows):
    instance, step = _failed_task_step(engine)
    Application.objects.filter(pk=engine.application.id).update(max_active_tasks=0)
    counts = (Activation.objects.count(), Task.objects.count(), Step.objects.get(pk=step.pk).revision)
    with transaction.atomic():
        assert _retry(engine, instance, step, remaining=2) is None
    assert (Activation.objects.count(), Task.objects.count(), Step.objects.get(pk=step.pk).revision) == counts
    assert quota_rows()[0].active_tasks == 0


def test_a_reviewed_task_is_settled_its_permit_released_and_its_unknown_lease_closed(engine, quota_rows):
    _, task = _lost_lease(engine)
    assert task.state == TaskState.NEEDS_REVIEW and task.permit_held and quota_rows()[0].active_tasks == 1
    now = clock.now()
    with transaction.atomic():
        locks = LockSet()
        locked = locks.lock_one(Level.TASK, task.id)
        application = locks.lock_one(Level.APPLICATION, task.application_id)
        queue = locks.lock_queues(task.namespace_id, ["payments"])["payments"]
        task_settle_reviewed(
            locks=locks,
            task=locked,
            conclusion="SUCCEEDED",
            result='{"ok":true}',
            now=now,
            application=application,
            queue=queue,
        )
    stored = Task.objects.get(pk=task.pk)
    assert (stored.state, stored.outcome, stored.review_conclusion) == ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED")
    assert (stored.result, stored.execution_settled, stored.permit_held) == ('{"ok":true}', True, False)
    assert stored.revision == task.revision + 1
    attempt = Attempt.objects.get(task=task)
    assert (attempt.state, attempt.finished_at) == (AttemptState.UNKNOWN, now)
    application, queues = quota_rows()
    assert application.active_tasks == 0 == queues["payments"].active_tasks


def test_a_task_holding_a_permit_is_not_settled_without_its_quota_rows(engine, quota_rows):
    _, task = _lost_lease(engine)
    with pytest.raises(AssertionError), transaction.atomic():
        task_settle_reviewed(locks=LockSet(), task=task, conclusion="FAILED", result="{}", now=clock.now())
    assert Task.objects.get(pk=task.pk).state == TaskState.NEEDS_REVIEW and quota_rows()[0].active_tasks == 1


def test_a_chain_gives_its_first_task_the_budget_and_each_retry_what_its_predecessor_left():
    first = Task(max_attempts=3, attempt_count=1)
    assert link_max_attempts(budget=3, previous=None) == 3
    assert attempts_left(first) == 2 == link_max_attempts(budget=3, previous=first)
    assert attempt_budget(spec={"kind": "TASK", "max_attempts": 4}, activation=None) == 4
    assert attempt_budget(spec={"kind": "POLL"}, activation=Activation(attempts_per_round=2)) == 2
    assert Budget(total=3, used=1, activations=1).refusal() is None
    assert Budget(total=3, used=1, activations=1).remaining == 2
    assert Budget(total=3, used=3, activations=2).refusal() == "the attempt budget is spent: 3 of 3 attempts used"
    assert Budget(total=3, used=2, activations=3).refusal() == "3 of at most 3 activations already ran"


def test_a_retried_activation_keeps_a_failed_or_cancelled_end_and_is_otherwise_superseded():
    for state, left in (
        (ActivationState.FAILED, ActivationState.FAILED),
        (ActivationState.CANCELLED, ActivationState.CANCELLED),
        (ActivationState.NEEDS_REVIEW, ActivationState.SUPERSEDED),
    ):
        assert activation_superseded_state(Activation(state=state)) == left


def test_a_retry_keeps_the_budget_left_and_the_previous_tasks_fixed_fields(engine, quota_rows):
    instance, step = _failed_task_step(engine, max_attempts=3)
    previous = Task.objects.get(source_activation_id=step.current_activation_id)
    with transaction.atomic():
        _, task = _retry(engine, instance, step, remaining=link_max_attempts(budget=3, previous=previous))
    task = Task.objects.get(pk=task.pk)
    assert task.max_attempts == 3 - previous.attempt_count == attempts_left(task) + task.attempt_count
    assert [getattr(task, name) for name in Task.FIXED_FIELDS] == [
        getattr(previous, name) for name in Task.FIXED_FIELDS
    ]


def test_a_poll_retry_requeries_the_same_round_keeping_the_frozen_limits(engine, quota_rows):
    instance = engine.start(engine.define([poll_step(handler="demo.fail")]))
    engine.settle()
    engine.work("polls")
    engine.settle()
    step = Step.objects.get(instance=instance, key="settle")
    previous = Task.objects.get(source_activation_id=step.current_activation_id)
    current = Activation.objects.get(pk=step.current_activation_id)
    with transaction.atomic():
        activation, task = _retry(engine, instance, step, remaining=1, queue="polls", business_round=1)
    activation, current = Activation.objects.get(pk=activation.pk), Activation.objects.get(pk=current.pk)
    # The round's own fields (its number, attempts used and deadline) are the retried round's, not the activation's.
    round_fields = ("first_round", "first_round_attempts_used", "round_deadline_at")
    kept = [name for name in Activation.POLL_FIELDS if name not in round_fields]
    assert [getattr(activation, name) for name in kept] == [getattr(current, name) for name in kept]
    assert (activation.first_round, activation.first_round_attempts_used) == (1, previous.attempt_count)
    assert (activation.round_deadline_at, activation.last_task_id, activation.task_id) == (
        previous.deadline_at,
        task.id,
        None,
    )
    assert PollRound.objects.get(activation=activation).task_id == task.id
    assert (task.source_round, task.retry_of_id, task.deadline_at) == (1, previous.id, previous.deadline_at)
