"""RetryStep: a new activation within the original budget, nothing else."""

import datetime as dt

import pytest

from core import clock
from engine.runner import runner_settle
from history.models import (
    Activation,
    Attempt,
    Gate,
    InboxRecord,
    PollRound,
    Signal,
    Step,
    Task,
    TaskState,
    Wait,
    WorkflowInstance,
)
from recovery.operations import instance_continue, step_resolve, step_retry
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db
FAILED, CANCELLED = "FAILED", "CANCELLED"


def _retry(state, identity, key="retry"):
    receipt = rq.run(step_retry, identity, state, rq.retry(state), key=key)
    return (
        receipt,
        Task.objects.get(pk=receipt.data["task_id"]),
        Activation.objects.get(pk=receipt.data["activation_id"]),
    )


def test_retry_step_gives_the_new_task_what_is_left_of_max_attempts(tenancy, recoverer):
    state = states.task_failed_state(tenancy, attempts_used=2)
    receipt, task, activation = _retry(state, recoverer)
    assert task.max_attempts == 1 and task.attempt_count == 0 and task.state == TaskState.QUEUED
    assert activation.sequence == 2 and activation.state == "ACTIVE" and activation.task_id == task.id
    assert receipt.data["activation_sequence"] == 2
    states.assert_invariants(state)


def test_the_new_task_retries_the_previous_one_and_inherits_its_fixed_source(tenancy, recoverer):
    state = states.task_failed_state(tenancy, attempts_used=1)
    first, old = state.activation, state.task
    _, task, activation = _retry(state, recoverer)
    assert task.retry_of_id == old.id
    assert (task.deadline_at, task.latest_start_at) == (first.deadline_at, first.latest_start_at)
    assert (activation.deadline_at, activation.latest_start_at, activation.input) == (
        first.deadline_at,
        first.latest_start_at,
        first.input,
    )
    same = ("input", "business_key", "concurrency_key", "handler", "priority", "queue_id", "application_id")
    assert all(getattr(task, name) == getattr(old, name) for name in same)
    assert (task.source_instance_id, task.source_activation_id, task.source_round) == (
        state.instance.id,
        activation.id,
        None,
    )


def test_retry_step_charges_the_original_application_and_queue_and_holds_a_permit(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    _, task, _ = _retry(state, recoverer)
    state.fresh()
    assert task.permit_held and state.application.active_tasks == 1 and state.queue.active_tasks == 1


def test_retry_step_keeps_the_gate_closed_and_the_instance_in_review(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    receipt, _, _ = _retry(state, recoverer)
    assert receipt.data["state"] == "NEEDS_REVIEW"
    assert not Gate.objects.get(pk=state.instance.pk).open
    assert Step.objects.get(pk=state.step.pk).state == "ACTIVE"


def test_retry_step_leaves_a_failed_activation_failed_and_supersedes_one_in_review(tenancy, recoverer):
    failed = states.task_failed_state(tenancy)
    _retry(failed, recoverer)
    assert Activation.objects.get(pk=failed.activation.pk).state == FAILED
    reviewed = states.task_reviewed_state(tenancy, conclusion=FAILED)
    _retry(reviewed, recoverer, key="other")
    assert Activation.objects.get(pk=reviewed.activation.pk).state == "SUPERSEDED"
    assert Task.objects.get(pk=reviewed.task.pk).state == FAILED


def test_retry_step_refuses_when_the_budget_is_spent(tenancy, recoverer):
    state = states.task_retried_state(tenancy, attempts_used=(2, 1))
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


def test_activations_cancelled_before_any_attempt_leave_the_full_budget_but_count_as_activations(tenancy, recoverer):
    state = states.task_chain_state(tenancy, [(CANCELLED, CANCELLED, []), (CANCELLED, CANCELLED, [])])
    _, task, activation = _retry(state, recoverer)
    assert (activation.sequence, task.max_attempts) == (3, 3)
    capped = states.task_chain_state(tenancy, [(CANCELLED, CANCELLED, [])] * 3)
    assert_refused(lambda: rq.run(step_retry, recoverer, capped, rq.retry(capped)), "FAILED_PRECONDITION")


def test_unknown_and_cancelled_attempts_count_against_the_budget(tenancy, recoverer):
    state = states.task_chain_state(tenancy, [(FAILED, CANCELLED, ["UNKNOWN", CANCELLED])])
    Task.objects.filter(pk=state.task.pk).update(review_conclusion=CANCELLED)
    _, task, _ = _retry(state, recoverer)
    assert task.max_attempts == 1


def test_retry_step_never_reruns_a_succeeded_step(tenancy, recoverer):
    reviewed = states.task_reviewed_state(tenancy)
    assert_refused(lambda: rq.run(step_retry, recoverer, reviewed, rq.retry(reviewed)), "FAILED_PRECONDITION")
    rq.run(step_resolve, recoverer, reviewed, rq.resolve(reviewed), key="resolve")
    assert_refused(lambda: rq.run(step_retry, recoverer, reviewed, rq.retry(reviewed)), "FAILED_PRECONDITION")


def test_retry_step_refuses_under_a_stop_intent(tenancy, recoverer):
    state = states.task_failed_state(tenancy, stop_kind="CANCEL")
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


@pytest.mark.parametrize("deadline", ["instance", "task", "latest_start"])
def test_retry_step_refuses_once_a_deadline_has_passed(tenancy, recoverer, deadline):
    state = states.task_failed_state(tenancy)
    past = clock.now() - dt.timedelta(seconds=1)
    if deadline == "instance":
        WorkflowInstance.objects.filter(pk=state.instance.pk).update(deadline_at=past)
    elif deadline == "task":
        Task.objects.filter(pk=state.task.pk).update(deadline_at=past)
    else:
        Task.objects.filter(pk=state.task.pk).update(latest_start_at=past)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


def test_retry_step_refuses_an_unsettled_history(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


@pytest.mark.parametrize("corruption", ["attempt_rows", "retry_of", "input", "max_attempts", "handler"])
def test_retry_step_reports_a_disagreeing_history_as_corruption(tenancy, recoverer, corruption):
    state = states.task_retried_state(tenancy)
    task = state.task
    if corruption == "attempt_rows":
        Attempt.objects.filter(task=task).delete()
    elif corruption == "retry_of":
        Task.objects.filter(pk=task.pk).update(retry_of=None)
    elif corruption == "input":
        Task.objects.filter(pk=task.pk).update(input='{"order":"B-2"}')
    elif corruption == "max_attempts":
        Task.objects.filter(pk=task.pk).update(max_attempts=9)
    else:
        Task.objects.filter(pk__in=[t.pk for t in state.tasks]).update(handler="other")
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "UNAVAILABLE")


@pytest.mark.parametrize("full", ["application", "queue"])
def test_a_full_quota_is_resource_exhausted_and_leaves_nothing(tenancy, recoverer, full):
    state = states.task_failed_state(tenancy)
    row = state.application if full == "application" else state.queue
    row.max_active_tasks = row.active_tasks
    row.save()
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "RESOURCE_EXHAUSTED")


def test_retry_step_refuses_signal_and_timer_steps(tenancy, recoverer):
    state = states.timer_late_state(tenancy)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


# ---- POLL ----------------------------------------------------------------------------------


def test_poll_retry_keeps_the_business_round_its_remaining_attempts_and_deadlines(tenancy, recoverer):
    state = states.poll_round_failed_state(tenancy)
    old = state.activation
    round_task = state.task
    _, task, activation = _retry(state, recoverer)
    # used_rounds counts answered rounds: round 2 failed unanswered, so the retry reopens round 2.
    assert (activation.first_round, activation.first_round_attempts_used) == (2, 1)
    assert activation.used_rounds == old.used_rounds == 1
    assert (activation.poll_deadline_at, activation.round_deadline_at) == (old.poll_deadline_at, round_task.deadline_at)
    assert (activation.max_rounds, activation.attempts_per_round, activation.interval_seconds) == (3, 2, 60)
    assert activation.last_task_id == task.id and activation.task_id is None
    assert (task.max_attempts, task.source_round, task.retry_of_id) == (1, 2, round_task.id)
    assert task.deadline_at == round_task.deadline_at
    rounds = PollRound.objects.filter(activation=activation)
    assert [(r.round, r.task_id) for r in rounds] == [(2, task.id)]
    assert not PollRound.objects.filter(instance=state.instance, round=3).exists()
    states.assert_invariants(state)


def test_poll_retry_refuses_a_round_that_spent_its_attempts(tenancy, recoverer):
    state = states.poll_round_failed_state(tenancy)
    _, task, _ = _retry(state, recoverer)
    Attempt.objects.create(task=task, number=1, worker="w", state=FAILED)
    Task.objects.filter(pk=task.pk).update(state=FAILED, attempt_count=1, permit_held=False)
    Activation.objects.filter(pk=task.source_activation_id).update(state=FAILED)
    states.quota_sync(state)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


def test_a_round_whose_query_answered_pending_is_never_re_queried(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


def test_a_broken_final_signal_wait_of_a_poll_gets_a_new_generation_without_a_new_query(tenancy, recoverer):
    state = states.poll_final_signal_violation_state(tenancy)
    old_wait, old = state.wait, state.activation
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state))
    activation = Activation.objects.get(pk=receipt.data["activation_id"])
    wait = Wait.objects.get(pk=activation.wait_id)
    assert "task_id" not in receipt.data and Task.objects.filter(source_instance=state.instance).count() == 1
    assert (activation.sequence, activation.state, activation.last_round_classification) == (2, "WAITING", "SUCCEEDED")
    assert (activation.used_rounds, activation.poll_deadline_at) == (old.used_rounds, old.poll_deadline_at)
    assert (wait.generation, wait.kind, wait.deadline_at) == (2, "POLL_FINAL_SIGNAL", old_wait.deadline_at)
    assert (wait.signal_name, wait.correlation_key) == (old_wait.signal_name, old_wait.correlation_key)
    assert Wait.objects.get(pk=old_wait.pk).state == "SUPERSEDED"
    states.assert_invariants(state)


def test_a_final_signal_buffered_in_review_is_taken_by_the_generation_retry_step_opens(tenancy, recoverer):
    state = states.poll_final_signal_violation_state(tenancy, later=({"status": "DONE", "ref": "b-1"},))
    buffered = state.signals[1]
    assert InboxRecord.objects.get(signal_id=buffered.id).disposition == "BUFFERED"
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state))
    # The retry's own transaction: the new generation took the signal, no query was sent.
    activation = Activation.objects.get(pk=receipt.data["activation_id"])
    wait, buffered = Wait.objects.get(pk=activation.wait_id), Signal.objects.get(pk=buffered.pk)
    assert (wait.generation, wait.kind, wait.state, wait.winner_signal_id) == (
        2,
        "POLL_FINAL_SIGNAL",
        "SATISFIED",
        buffered.id,
    )
    assert (buffered.state, buffered.consumed_wait_id) == ("CONSUMED", wait.id)
    assert (activation.state, Step.objects.get(pk=state.step.pk).state) == ("SUCCEEDED", "SUCCEEDED")
    assert "task_id" not in receipt.data and Task.objects.filter(source_instance=state.instance).count() == 1
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "NEEDS_REVIEW"
    rq.run(instance_continue, recoverer, state, rq.continue_(state), key="continue")
    runner_settle()
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "SUCCEEDED"
    states.assert_invariants(state)


def test_a_final_signal_wait_past_its_deadline_is_never_extended(tenancy, recoverer):
    state = states.poll_final_signal_violation_state(tenancy)
    with clock.moved(dt.timedelta(hours=2)):
        command = rq.retry(state)
        assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "FAILED_PRECONDITION")
