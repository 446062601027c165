"""Eligibility and preview: the operations' own checks run without writing, and agree with the commit."""

import pytest

from history.models import InstanceState, Task, WorkflowInstance
from recovery.eligibility import instance_eligibility, operation_preview
from recovery.operations import step_retry
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused, history_digest

pytestmark = pytest.mark.django_db


def test_eligibility_offers_retry_with_its_preview_and_explains_every_refusal(tenancy, recoverer):
    state = states.task_failed_state(tenancy, attempts_used=2)
    before = history_digest()
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    assert history_digest() == before
    charge = eligibility["steps"]["charge"]
    retry = charge["retry-step"]
    assert retry["possible"] is True
    preview = retry["preview"]
    assert preview["new_activation"]["sequence"] == 2
    assert preview["attempt_budget"] == {"used": 2, "remaining": 1}
    assert preview["deadlines_kept"]["deadline_at"].endswith("Z")
    revision = state.instance.revision
    assert preview["instance"]["revision"] == {"before": str(revision), "after": str(revision + 1)}
    assert preview["instance"]["state"] == {"before": "NEEDS_REVIEW", "after": "NEEDS_REVIEW"}
    assert charge["review-task"]["possible"] is False and "NEEDS_REVIEW" in charge["review-task"]["reason"]
    assert charge["continue-poll"] == {
        "possible": False,
        "code": "FAILED_PRECONDITION",
        "reason": "ContinuePoll applies to POLL steps; 'charge' is TASK",
    }
    assert charge["rearm-wait"]["possible"] is False
    assert charge["resolve-step"]["possible"] is True
    assert eligibility["continue"]["possible"] is False
    assert "without a conclusion" in eligibility["continue"]["reason"]


def test_eligibility_offers_review_task_for_a_task_in_review(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    entry = instance_eligibility(identity=recoverer, instance_id=state.instance.id)["steps"]["charge"]
    assert entry["review-task"]["possible"] is True and entry["review-task"]["task_id"] == state.task.id
    assert entry["review-task"]["preview"]["task"]["permit_held"] == {"before": True, "after": False}
    assert entry["resolve-step"]["possible"] is False and "NEEDS_REVIEW" in entry["resolve-step"]["reason"]


def test_eligibility_of_an_instance_not_in_review_refuses_everything_with_the_reason(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    assert eligibility["continue"]["possible"] is False and "RUNNING" in eligibility["continue"]["reason"]
    assert all(not entry["possible"] for entry in eligibility["steps"]["charge"].values())


def test_continue_preview_shows_the_state_and_gate_after(tenancy, recoverer):
    state = states.task_resolved_state(tenancy)
    preview = instance_eligibility(identity=recoverer, instance_id=state.instance.id)["continue"]["preview"]
    assert preview["instance"]["state"] == {"before": "NEEDS_REVIEW", "after": "RUNNING"}
    assert preview["instance"]["gate_open"] == {"before": False, "after": True}
    assert preview["root_continuation"] == "CONTINUE"


def test_a_preview_matches_what_the_commit_does(tenancy, recoverer):
    state = states.poll_round_failed_state(tenancy)
    command = rq.retry(state)
    preview = operation_preview(
        identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command
    )
    receipt = rq.run(step_retry, recoverer, state, command)
    task = Task.objects.get(pk=receipt.data["task_id"])
    assert preview["new_task"]["max_attempts"] == task.max_attempts
    assert preview["new_activation"]["sequence"] == receipt.data["activation_sequence"]
    assert preview["new_activation"]["first_round"] == 2
    assert preview["instance"]["revision"]["after"] == receipt.data["revision"]


def test_the_commit_refuses_a_stale_preview(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state)
    operation_preview(identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(revision=21)  # a background fact arrived
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "ABORTED")


def test_a_preview_refuses_like_the_commit(tenancy, recoverer):
    state = states.task_failed_state(tenancy, stop_kind="CANCEL")
    assert_refused(
        lambda: operation_preview(
            identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=rq.retry(state)
        ),
        "FAILED_PRECONDITION",
    )


def _entry(eligibility: dict, state, operation: str) -> dict:
    if operation == "continue":
        return eligibility["continue"]
    return eligibility["steps"][state.step.key][operation]


@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[c[0] for c in rq.cases()])
def test_eligibility_offers_exactly_the_operation_that_then_commits(tenancy, recoverer, name, service, build, make):
    state = make(tenancy)
    operation = next(op for op in ("rearm-wait", "retry-step", name) if name.startswith(op))
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    entry = _entry(eligibility, state, operation)
    assert entry["possible"] is True, entry
    receipt = rq.run(service, recoverer, state, build(state))
    assert entry["preview"]["instance"]["revision"]["after"] == receipt.data["revision"]
    assert entry["preview"]["operation"] == receipt.data["operation"]
