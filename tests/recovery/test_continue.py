"""Continue: lift the review only when the server's own checks allow it."""

import datetime as dt

import pytest

from core import clock
from history.models import (
    Activation,
    Attempt,
    Continuation,
    Gate,
    Step,
    Task,
    TaskState,
    WorkflowInstance,
)
from recovery.operations import instance_continue, step_resolve, step_retry, task_review
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db


def _resolved(tenancy, identity, *, conclusion="SUCCEEDED", **instance):
    state = states.task_reviewed_state(tenancy, conclusion=conclusion, **instance)
    result = {"paid": True} if conclusion == "SUCCEEDED" else "declined"
    rq.run(step_resolve, identity, state, rq.resolve(state, conclusion=conclusion, result=result), key="resolve")
    return state


def _continue(state, identity):
    receipt = rq.run(instance_continue, identity, state, rq.continue_(state), key="continue")
    return receipt, WorkflowInstance.objects.get(pk=state.instance.pk), Gate.objects.get(pk=state.instance.pk)


def test_continue_runs_the_instance_opens_the_gate_and_saves_a_root_continuation(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, steps=[states.TASK_STEP, states.NEXT_STEP])
    deadline = state.instance.deadline_at
    started = list(Continuation.objects.filter(instance=state.instance).values_list("id", flat=True))
    receipt, instance, gate = _continue(state, recoverer)
    assert (instance.state, gate.open, instance.paused, instance.stop_kind) == ("RUNNING", True, False, None)
    assert receipt.data["state"] == "RUNNING" and "step_key" not in receipt.data
    continuation = Continuation.objects.filter(instance=instance).exclude(id__in=started).get()
    assert (continuation.step_key, continuation.state) == ("$root", "PENDING")
    assert instance.deadline_at == deadline and instance.review_reason == ""
    states.assert_invariants(state)


def test_continue_clears_the_review_cause_step_and_time_with_the_reason(tenancy, recoverer):
    state = _resolved(tenancy, recoverer)
    assert (state.instance.review_cause, state.instance.review_step_key) == ("task_outcome_unknown", "charge")
    _, instance, _ = _continue(state, recoverer)
    assert instance.state == "RUNNING"
    assert (instance.review_reason, instance.review_cause, instance.review_step_key, instance.review_since) == (
        "",
        "",
        "",
        None,
    )
    states.assert_invariants(state)


def test_continue_handing_a_stop_to_the_stop_path_clears_the_review_cause_too(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, conclusion="FAILED")
    _, instance, _ = _continue(state, recoverer)
    assert instance.state in ("CANCELLING", "FAILED") and instance.stop_kind == "FAIL"
    assert (instance.review_cause, instance.review_step_key, instance.review_since) == ("", "", None)
    states.assert_invariants(state)


def test_continue_does_not_lift_an_explicit_pause(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, paused=True)
    receipt, instance, gate = _continue(state, recoverer)
    assert (instance.state, instance.paused, gate.open, receipt.data["paused"]) == ("RUNNING", True, False, True)


def test_a_stop_intent_hands_the_instance_to_the_stop_path_and_a_later_success_never_revokes_it(tenancy, recoverer):
    state = states.cancel_unknown_state(tenancy)
    rq.run(task_review, recoverer, state, rq.review(state), key="review")
    states.reviewed_record_consume(state)
    rq.run(step_resolve, recoverer, state, rq.resolve(state), key="resolve")
    continuations = Continuation.objects.filter(instance=state.instance).count()
    receipt, instance, gate = _continue(state, recoverer)
    assert (instance.state, instance.stop_kind, gate.open) == ("CANCELLING", "CANCEL", False)
    assert receipt.data["state"] == "CANCELLING"
    assert Continuation.objects.filter(instance=instance).count() == continuations
    assert Task.objects.filter(source_instance=instance).count() == 1


def test_a_step_concluded_failed_records_stop_kind_fail(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, conclusion="FAILED")
    _, instance, gate = _continue(state, recoverer)
    assert (instance.state, instance.stop_kind, gate.open) == ("CANCELLING", "FAIL", False)
    assert "charge" in instance.stop_reason


def test_continue_refuses_a_passed_instance_deadline_and_never_extends_it(tenancy, recoverer):
    state = _resolved(tenancy, recoverer)
    with clock.moved(dt.timedelta(hours=5)):
        command = rq.continue_(state)
        assert_refused(lambda: rq.run(instance_continue, recoverer, state, command), "FAILED_PRECONDITION")


def test_a_stop_intent_wins_over_a_passed_deadline(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, stop_kind="CANCEL")
    with clock.moved(dt.timedelta(hours=5)):
        _, instance, _ = _continue(state, recoverer)
    assert instance.state == "CANCELLING"


def test_continue_refuses_a_step_in_review(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, rq.continue_(state)), "FAILED_PRECONDITION")


def test_continue_refuses_a_failed_step_without_a_conclusion(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, rq.continue_(state)), "FAILED_PRECONDITION")


def test_a_conclusion_of_an_earlier_activation_does_not_count(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, conclusion="FAILED")
    Step.objects.filter(pk=state.step.pk).update(current_activation_id="f" * 32)
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, rq.continue_(state)), "FAILED_PRECONDITION")


def test_continue_refuses_a_task_in_review_on_another_branch(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, steps=[states.TASK_STEP, states.NEXT_STEP])
    # Written directly: the engine puts a step in review with its task, so only such rows reach this check.
    sibling = states.activation_add(state, "ship", state_="ACTIVE")
    states.task_add(state, sibling, state_=TaskState.NEEDS_REVIEW, attempts=["UNKNOWN"], max_attempts=1)
    Activation.objects.filter(pk=sibling.pk).update(task=state.task)
    states.quota_sync(state)
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, rq.continue_(state)), "FAILED_PRECONDITION")


def test_continue_refuses_an_unknown_attempt_that_was_never_reviewed(tenancy, recoverer):
    state = _resolved(tenancy, recoverer)
    Task.objects.filter(pk=state.task.pk).update(review_conclusion="")
    assert Attempt.objects.filter(task=state.task, state="UNKNOWN").exists()
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, rq.continue_(state)), "FAILED_PRECONDITION")


def test_continue_after_retry_lets_the_new_task_run(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    retried = rq.run(step_retry, recoverer, state, rq.retry(state), key="retry")
    _, instance, gate = _continue(state, recoverer)
    assert instance.state == "RUNNING" and gate.open
    assert Task.objects.get(pk=retried.data["task_id"]).state == TaskState.QUEUED


def test_continue_keeps_an_earlier_fail_settlement(tenancy, recoverer):
    state = _resolved(tenancy, recoverer, stop_kind="FAIL")
    _, instance, gate = _continue(state, recoverer)
    assert (instance.state, instance.stop_kind, instance.stop_reason, gate.open) == (
        "CANCELLING",
        "FAIL",
        state.instance.stop_reason,
        False,
    )
