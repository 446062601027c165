"""ResolveStep: a management conclusion on the current activation, nothing re-run."""

import datetime as dt

import pytest

from core import clock
from history.models import (
    Activation,
    Attempt,
    PollRound,
    ResultEvent,
    Step,
    Task,
    TaskState,
    Wait,
    WorkflowInstance,
)
from recovery.operations import step_resolve, step_retry, task_review
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused


def _untouched_rows(state):
    """Pulse results, attempts, events, waits and poll rounds: what ResolveStep never rewrites."""
    return (
        list(Task.objects.order_by("pk").values_list()),
        list(Attempt.objects.order_by("pk").values_list()),
        list(ResultEvent.objects.order_by("pk").values_list()),
        list(Wait.objects.order_by("pk").values_list()),
        list(PollRound.objects.order_by("pk").values_list()),
    )


pytestmark = pytest.mark.django_db


def test_resolve_step_saves_the_conclusion_on_the_current_activation_and_step(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    kept = _untouched_rows(state)
    receipt = rq.run(step_resolve, recoverer, state, rq.resolve(state, result={"paid": True, "ref": "tx-9"}))
    step, activation = Step.objects.get(pk=state.step.pk), Activation.objects.get(pk=state.activation.pk)
    assert step.state == activation.state == "SUCCEEDED"
    assert step.output == activation.output == '{"paid":true,"ref":"tx-9"}'
    assert step.resolution["conclusion"] == "SUCCEEDED"
    assert step.resolution["operation_id"] == receipt.data["operation_id"]
    assert receipt.data["activation_id"] == activation.id and receipt.data["activation_sequence"] == 1
    assert _untouched_rows(state) == kept
    states.assert_invariants(state)


def test_resolve_step_audits_the_previous_state_output_and_a_digest_of_the_result(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy, conclusion="FAILED")
    rq.run(step_resolve, recoverer, state, rq.resolve(state, conclusion="FAILED", result="card declined"))
    audit = state.operations().get()
    assert audit.action == "workflow.resolve_step" and audit.step_key == "charge"
    assert audit.before["step"]["state"] == "NEEDS_REVIEW" and audit.before["activation"]["output"] is None
    assert audit.after["step"]["state"] == "FAILED" and len(audit.after["step"]["result_digest"]) == 64


def test_resolve_step_does_not_re_execute_old_tasks(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    rq.run(step_resolve, recoverer, state, rq.resolve(state))
    assert Task.objects.filter(source_instance=state.instance).count() == 1
    assert Activation.objects.filter(step=state.step).count() == 1


def test_resolve_step_does_not_clear_the_instance_review_or_the_stop_intent(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy, stop_kind="CANCEL")
    receipt = rq.run(step_resolve, recoverer, state, rq.resolve(state))
    instance = WorkflowInstance.objects.get(pk=state.instance.pk)
    assert (instance.state, instance.stop_kind) == ("NEEDS_REVIEW", "CANCEL")
    assert receipt.data["state"] == "NEEDS_REVIEW"


def test_an_unknown_execution_is_reviewed_and_its_reviewed_record_consumed_before_the_step_resolves(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, rq.resolve(state)), "FAILED_PRECONDITION")
    rq.run(task_review, recoverer, state, rq.review(state), key="review")
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, rq.resolve(state)), "FAILED_PRECONDITION")
    states.reviewed_record_consume(state)
    assert rq.run(step_resolve, recoverer, state, rq.resolve(state)).data["step_key"] == "charge"


def test_resolve_step_refuses_a_result_that_breaks_the_fixed_contract(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    command = rq.resolve(state, result={"paid": "yes"})
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "INVALID_ARGUMENT", field="result")


def test_a_failed_conclusion_takes_any_json_but_null(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy, conclusion="FAILED")
    rq.run(step_resolve, recoverer, state, rq.resolve(state, conclusion="FAILED", result=[1, "not the contract"]))
    assert Step.objects.get(pk=state.step.pk).output == '[1,"not the contract"]'


def test_resolve_step_refuses_an_activation_that_is_not_in_review_failed_or_cancelled(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    rq.run(step_retry, recoverer, state, rq.retry(state), key="retry")
    command = rq.resolve(state, conclusion="FAILED", result="x")
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "FAILED_PRECONDITION")


def test_resolve_step_refuses_a_historical_task_still_holding_its_permit(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    Task.objects.filter(pk=state.task.pk).update(permit_held=True)
    states.quota_sync(state)
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, rq.resolve(state)), "FAILED_PRECONDITION")


def test_resolve_step_verifies_ownership_of_every_historical_task_first(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    Task.objects.filter(pk=state.task.pk).update(state=TaskState.LEASED, namespace_id="f" * 32)
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, rq.resolve(state)), "UNAVAILABLE")


def test_poll_success_must_classify_succeeded_and_keeps_used_rounds(tenancy, recoverer):
    state = states.poll_rounds_exhausted_state(tenancy)
    pending = rq.resolve(state, result={"status": "WAITING"})
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, pending), "INVALID_ARGUMENT", field="result")
    rq.run(step_resolve, recoverer, state, rq.resolve(state, result={"status": "DONE", "ref": 7}))
    activation = Activation.objects.get(pk=state.activation.pk)
    assert activation.state == "SUCCEEDED" and activation.used_rounds == states.POLL_STEP["max_rounds"]


def test_timer_success_needs_an_explicit_null_result(tenancy, recoverer):
    state = states.timer_late_state(tenancy)
    command = rq.resolve(state, result={})
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "INVALID_ARGUMENT", field="result")
    rq.run(step_resolve, recoverer, state, rq.resolve(state, result=None))
    assert Step.objects.get(pk=state.step.pk).output == "null"


def test_timer_success_needs_the_original_duration_elapsed(tenancy, recoverer):
    state = states.timer_late_state(tenancy)
    command = rq.resolve(state, result=None)
    with clock.moved(state.wait.fire_at - clock.now() - dt.timedelta(minutes=5)):
        assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "FAILED_PRECONDITION")
    rq.run(step_resolve, recoverer, state, command)
    assert Step.objects.get(pk=state.step.pk).state == "SUCCEEDED"


def test_a_signal_step_resolves_with_a_payload_of_its_contract(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    bad = rq.resolve(state, result={"who": "x"})
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, bad), "INVALID_ARGUMENT", field="result")
    rq.run(step_resolve, recoverer, state, rq.resolve(state, result={"by": "alice"}))
    assert Wait.objects.get(pk=state.wait.pk).state == "NEEDS_REVIEW"
