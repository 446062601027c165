"""The internal call sequences of the recovery scenarios; the engine's inbox consumer takes each REVIEWED
record (``states.reviewed_record_consume``)."""

import pytest

from history.models import Activation, Continuation, Gate, Task, WorkflowInstance
from recovery.operations import instance_continue, step_resolve, step_retry, task_review
from testkit import requests as rq
from testkit import states

pytestmark = pytest.mark.django_db


def _instance(state):
    return WorkflowInstance.objects.get(pk=state.instance.pk)


def test_task_outcome_unknown_then_verified_succeeded(tenancy, recoverer):
    state = states.task_unknown_state(tenancy, steps=[states.TASK_STEP, states.NEXT_STEP])
    rq.run(task_review, recoverer, state, rq.review(state), key="1")
    states.reviewed_record_consume(state)
    rq.run(step_resolve, recoverer, state, rq.resolve(state), key="2")
    receipt = rq.run(instance_continue, recoverer, state, rq.continue_(state), key="3")
    assert receipt.data["state"] == "RUNNING" and Gate.objects.get(pk=state.instance.pk).open
    assert Continuation.objects.filter(instance=state.instance, step_key="$root", state="PENDING").count() == 1
    states.assert_invariants(state)


def test_task_confirmed_failed_with_budget_left(tenancy, recoverer):
    state = states.task_failed_state(tenancy, attempts_used=1)
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state), key="1")
    task = Task.objects.get(pk=receipt.data["task_id"])
    assert task.deadline_at == state.activation.deadline_at and task.max_attempts == 2
    rq.run(instance_continue, recoverer, state, rq.continue_(state), key="2")
    assert _instance(state).state == "RUNNING" and Task.objects.get(pk=task.pk).state == "QUEUED"
    states.assert_invariants(state)


def test_poll_request_failed_with_budget_left(tenancy, recoverer):
    state = states.poll_round_failed_state(tenancy)
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state), key="1")
    activation = Activation.objects.get(pk=receipt.data["activation_id"])
    assert (activation.first_round, activation.first_round_attempts_used) == (2, 1)
    rq.run(instance_continue, recoverer, state, rq.continue_(state), key="2")
    assert _instance(state).state == "RUNNING"


def test_poll_rounds_exhausted_and_result_obtained_by_hand(tenancy, recoverer):
    state = states.poll_rounds_exhausted_state(tenancy)
    rq.run(step_resolve, recoverer, state, rq.resolve(state, result={"status": "DONE"}), key="1")
    rq.run(instance_continue, recoverer, state, rq.continue_(state), key="2")
    activation = Activation.objects.get(pk=state.activation.pk)
    assert _instance(state).state == "RUNNING" and activation.used_rounds == states.POLL_STEP["max_rounds"]


def test_unknown_after_cancel_settles_the_original_cancel_without_successor_work(tenancy, recoverer):
    state = states.cancel_unknown_state(tenancy)
    rq.run(task_review, recoverer, state, rq.review(state, conclusion="FAILED", result="aborted"), key="1")
    states.reviewed_record_consume(state)
    rq.run(step_resolve, recoverer, state, rq.resolve(state, conclusion="FAILED", result="aborted"), key="2")
    receipt = rq.run(instance_continue, recoverer, state, rq.continue_(state), key="3")
    assert receipt.data["state"] == "CANCELLING" and _instance(state).stop_kind == "CANCEL"
    assert Task.objects.filter(source_instance=state.instance).count() == 1
