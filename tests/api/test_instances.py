"""The instance detail, one task's execution history_rows, and the workflow audit."""

import datetime as dt

import pytest

from api import history_views
from history.models import (
    Activation,
    ActivationState,
    AttemptState,
    InstanceState,
    Queue,
    ReviewCause,
    Step,
    StopKind,
    Task,
    TaskState,
)
from tests.conftest import bearer, error_of
from tests.factories import (
    AttemptFactory,
    WorkflowInstanceFactory,
    WorkflowOperationFactory,
    activate,
    poll_round,
    step_of,
)

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)


def test_the_instance_detail_lists_every_step_in_definition_order_without_root(workflow, reader, call):
    status, body = call(f"/v1/workflows/{workflow.id}", reader)
    data = body["data"]
    assert status == 200
    assert list(data) == [
        "id",
        "namespace",
        "definition",
        "state",
        "paused",
        "revision",
        "control_revision",
        "created_at",
        "updated_at",
        "steps",
        "eligibility",
    ]
    assert (data["namespace"], data["definition"]) == ("acme", {"name": workflow.definition.name, "version": 1})
    assert [s["key"] for s in data["steps"]] == ["charge", "settle", "approve", "cool-off"]
    assert all(set(s) == {"id", "key", "kind", "state", "revision"} for s in data["steps"])
    # The registered recovery eligibility: nothing is possible on a RUNNING instance, each refusal says why.
    assert data["eligibility"]["continue"]["possible"] is False
    assert "NEEDS_REVIEW" in data["eligibility"]["continue"]["reason"]
    assert set(data["eligibility"]["steps"]) == {"charge", "settle", "approve", "cool-off"}


def test_the_instance_detail_shows_stop_deadline_review_and_completion_only_when_set(workflow, reader, call):
    workflow.state = InstanceState.NEEDS_REVIEW
    workflow.stop_kind = StopKind.CANCEL
    workflow.deadline_at = T0
    workflow.review_reason = "lease expired"
    workflow.review_cause = ReviewCause.TASK_OUTCOME_UNKNOWN
    workflow.review_step_key = "charge"
    workflow.review_since = T0 + dt.timedelta(seconds=1)
    workflow.completed_at = T0
    workflow.revision, workflow.control_revision = 9, 4
    workflow.save()
    _, body = call(f"/v1/workflows/{workflow.id}", reader)
    data = body["data"]
    assert (data["stop_kind"], data["deadline_at"], data["review_reason"], data["completed_at"]) == (
        "CANCEL",
        "2026-09-18T08:00:00Z",
        "lease expired",
        "2026-09-18T08:00:00Z",
    )
    assert (data["revision"], data["control_revision"], data["state"]) == ("9", "4", "NEEDS_REVIEW")
    assert (data["review_cause"], data["review_step_key"], data["review_since"]) == (
        "task_outcome_unknown",
        "charge",
        "2026-09-18T08:00:01Z",
    )


def test_the_instance_detail_shows_the_output_byte_exact_only_once_there_is_one(workflow, reader, api):
    path = f"/v1/workflows/{workflow.id}"
    before = api.get(path, **bearer(reader)).content
    workflow.state = InstanceState.SUCCEEDED
    workflow.output = '{"charge":{"n":12345678901234567890123,"x":1.50}}'
    workflow.completed_at = T0
    workflow.save()
    after = api.get(path, **bearer(reader)).content
    assert b'"output"' not in before
    assert b'"completed_at":"2026-09-18T08:00:00Z","output":{"charge":{"n":12345678901234567890123,"x":1.50}}' in after


def test_the_instance_detail_leaves_out_the_step_of_an_instance_wide_review_cause(workflow, reader, call):
    workflow.state = InstanceState.NEEDS_REVIEW
    workflow.review_reason = "corrupt inbox record"
    workflow.review_cause = ReviewCause.CORRUPT_INBOX_RECORD
    workflow.review_since = T0
    workflow.save()
    _, body = call(f"/v1/workflows/{workflow.id}", reader)
    assert body["data"]["review_cause"] == "corrupt_inbox_record" and "review_step_key" not in body["data"]


def test_each_step_shows_its_current_activation_with_the_task_a_recovery_command_needs(workflow, reader, call):
    charge = activate(step_of(workflow, "charge"), state=ActivationState.NEEDS_REVIEW, task={"revision": 3})
    Task.objects.filter(id=charge.task_id).update(state=TaskState.NEEDS_REVIEW, attempt_count=1)
    Step.objects.filter(id=charge.step_id).update(resolution={"conclusion": "FAILED", "operation_id": "b" * 32})
    _, body = call(f"/v1/workflows/{workflow.id}", reader)
    step = body["data"]["steps"][0]
    assert step["current_activation_id"] == charge.id
    assert step["resolution"] == {"conclusion": "FAILED", "operation_id": "b" * 32}
    assert step["current_activation"]["task"] == {
        "id": charge.task_id,
        "state": "NEEDS_REVIEW",
        "revision": "3",
        "attempt_count": 1,
        "max_attempts": 3,
    }


def test_the_eligibility_is_recoverys_document_of_the_rows_read(workflow, reader, call, monkeypatch):
    seen = {}

    verdict = {"instance": {"continue": {"eligible": False, "reason": "a step needs review"}}}

    def document(instance, steps):
        seen["args"] = (instance.id, [view.step.key for view in steps])
        return verdict

    monkeypatch.setattr(history_views, "instance_eligibility_document", document)
    _, body = call(f"/v1/workflows/{workflow.id}", reader)
    assert body["data"]["eligibility"] == verdict
    assert seen["args"] == (workflow.id, ["charge", "settle", "approve", "cool-off"])


@pytest.mark.parametrize("breaks", ["missing step", "extra step", "kind"])
def test_steps_that_disagree_with_the_definition_are_unavailable(workflow, reader, call, breaks):
    if breaks == "missing step":
        Step.objects.filter(instance=workflow, key="settle").delete()
    elif breaks == "extra step":
        Step.objects.create(instance=workflow, key="stray", kind="TASK")
    else:
        Step.objects.filter(instance=workflow, key="settle").update(kind="TASK")
    assert error_of(call(f"/v1/workflows/{workflow.id}", reader)) == (503, "UNAVAILABLE", None)


def test_a_current_task_that_does_not_point_back_is_unavailable(workflow, reader, call):
    charge = activate(step_of(workflow, "charge"))
    Task.objects.filter(id=charge.task_id).update(source_activation_id="d" * 32)
    assert error_of(call(f"/v1/workflows/{workflow.id}", reader))[0] == 503


def test_the_task_detail_shows_its_source_attempts_and_outcome(workflow, reader, api):
    old = activate(step_of(workflow, "charge"), state=ActivationState.FAILED)
    new = activate(step_of(workflow, "charge"), task={"retry_of_id": old.task_id, "input": '{"amount":1.10}'})
    AttemptFactory(task=new.task, state=AttemptState.UNKNOWN, lease_expires_at=T0, started_at=T0)
    AttemptFactory(task=new.task, state=AttemptState.SUCCEEDED, finished_at=T0, result='{"paid":1.0}')
    Task.objects.filter(id=new.task_id).update(
        state=TaskState.SUCCEEDED, outcome="SUCCEEDED", result='{"paid":1.0}', review_conclusion="SUCCEEDED"
    )
    response = api.get(f"/v1/workflows/{workflow.id}/tasks/{new.task_id}", **bearer(reader))
    assert response.status_code == 200
    assert b'"input":{"amount":1.10}' in response.content and b'"result":{"paid":1.0}' in response.content
    data = response.json()["data"]
    assert (data["instance_id"], data["revision"]) == (workflow.id, "1")
    task = data["task"]
    assert (task["step_key"], task["activation_id"], task["activation_sequence"]) == ("charge", new.id, 2)
    assert (task["queue"], task["handler"], task["retry_of"]) == ("payments", "charge", old.task_id)
    assert (task["outcome"], task["review_conclusion"], task["state"]) == ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED")
    assert "round" not in task
    assert [(a["number"], a["state"]) for a in task["attempts"]] == [(1, "UNKNOWN"), (2, "SUCCEEDED")]
    assert task["attempts"][0]["lease_expires_at"] == "2026-09-18T08:00:00Z"
    assert "finished_at" not in task["attempts"][0] and "result" not in task["attempts"][0]


def test_a_fresh_task_leaves_outcome_result_review_and_retry_of_out(workflow, reader, call):
    activation = activate(step_of(workflow, "charge"))
    _, body = call(f"/v1/workflows/{workflow.id}/tasks/{activation.task_id}", reader)
    assert not {"outcome", "result", "review_conclusion", "retry_of"} & set(body["data"]["task"])
    assert body["data"]["task"]["attempts"] == []


def test_a_poll_query_task_shows_its_business_round(workflow, reader, call):
    activation = activate(step_of(workflow, "settle"))
    poll_round(activation, 1)
    second = poll_round(activation, 2)
    _, body = call(f"/v1/workflows/{workflow.id}/tasks/{second.task_id}", reader)
    assert (body["data"]["task"]["round"], body["data"]["task"]["step_key"]) == (2, "settle")


def test_a_task_of_another_workflow_is_not_found_here(workflow, reader, call):
    other = WorkflowInstanceFactory(namespace=workflow.namespace, definition=workflow.definition)
    foreign = activate(step_of(other, "charge"))
    assert error_of(call(f"/v1/workflows/{workflow.id}/tasks/{foreign.task_id}", reader)) == (404, "NOT_FOUND", None)


@pytest.mark.parametrize("breaks", ["activation does not name it", "other queue", "poll round missing"])
def test_a_task_whose_source_does_not_agree_both_ways_is_unavailable(workflow, reader, call, breaks):
    if breaks == "poll round missing":
        activation = activate(step_of(workflow, "settle"))
        task_id = poll_round(activation, 1).task_id
        Task.objects.filter(id=task_id).update(source_round=2)
    else:
        activation = activate(step_of(workflow, "charge"))
        task_id = activation.task_id
        if breaks == "other queue":
            ledger = Queue.objects.create(namespace_id=workflow.namespace_id, name="ledger")
            Task.objects.filter(id=task_id).update(queue=ledger)
        else:
            Activation.objects.filter(id=activation.id).update(task_id="d" * 32)
    assert error_of(call(f"/v1/workflows/{workflow.id}/tasks/{task_id}", reader)) == (503, "UNAVAILABLE", None)


def test_the_workflow_audit_runs_newest_first_with_reason_and_snapshots(workflow, auditor, call):
    older = WorkflowOperationFactory(workflow=workflow, created_at=T0, action="workflow.start", before=None)
    newer = WorkflowOperationFactory(
        workflow=workflow,
        created_at=T0 + dt.timedelta(seconds=1),
        step_key="charge",
        activation_id="3" * 32,
        evidence_ref="ticket:OPS-1",
    )
    WorkflowOperationFactory(workflow=WorkflowInstanceFactory(namespace=workflow.namespace))
    path = f"/v1/workflows/{workflow.id}/operations"
    _, first = call(path, auditor, limit="1")
    _, second = call(path, auditor, limit="1", cursor=first["data"]["next_cursor"])
    assert (first["data"]["workflow_id"], first["data"]["revision"]) == (workflow.id, "1")
    (item,) = first["data"]["items"]
    assert item["id"] == newer.id
    assert (item["step_key"], item["activation_id"], item["evidence_ref"]) == ("charge", "3" * 32, "ticket:OPS-1")
    (start,) = second["data"]["items"]
    assert start["id"] == older.id and start["before"] is None and start["action"] == "workflow.start"
    assert not {"step_key", "activation_id", "execution_audit_id", "evidence_ref"} & set(start)
    assert "next_cursor" not in second["data"]
