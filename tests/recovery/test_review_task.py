"""ReviewTask: settle a task in review; never resolve the step or lift the review."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import exactjson
from history.models import (
    Activation,
    Attempt,
    AttemptState,
    ExecutionAudit,
    Gate,
    InboxRecord,
    InboxState,
    Queue,
    ResultEvent,
    ResultKind,
    Step,
    Task,
    TaskState,
    WorkflowInstance,
)
from recovery.operations import task_review
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db


def test_review_task_settles_the_task_with_the_exact_result_and_releases_its_permit(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    revision = state.task.revision
    command = rq.review(state, result=exactjson.loads('{"x":1,"amount":1.10}'))
    rq.run(task_review, recoverer, state, command)
    task = Task.objects.get(pk=state.task.pk)
    assert (task.state, task.outcome, task.review_conclusion) == ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED")
    assert task.result == '{"x":1,"amount":1.10}'
    assert task.execution_settled and not task.permit_held and task.revision == revision + 1
    states.assert_invariants(state)
    assert state.application.active_tasks == 0 and state.queue.active_tasks == 0


def test_review_task_keeps_unknown_attempts_unknown_and_only_closes_their_lease(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    rq.run(task_review, recoverer, state, rq.review(state, conclusion="FAILED", result="declined"))
    attempt = Attempt.objects.get(task=state.task)
    assert attempt.state == AttemptState.UNKNOWN and attempt.finished_at is not None
    assert Task.objects.get(pk=state.task.pk).state == TaskState.FAILED


def test_review_task_does_not_resolve_the_step_or_lift_the_instance_review(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    step_before = Step.objects.get(pk=state.step.pk)
    activation_before = Activation.objects.get(pk=state.activation.pk)
    receipt = rq.run(task_review, recoverer, state, rq.review(state))
    step, activation = Step.objects.get(pk=state.step.pk), Activation.objects.get(pk=state.activation.pk)
    assert (step.state, step.revision, step.output) == (step_before.state, step_before.revision, None)
    assert (activation.state, activation.revision, activation.verified_outcome) == (
        "NEEDS_REVIEW",
        activation_before.revision,
        "",
    )
    instance = WorkflowInstance.objects.get(pk=state.instance.pk)
    assert instance.state == "NEEDS_REVIEW" and receipt.data["state"] == "NEEDS_REVIEW"
    assert not Gate.objects.get(pk=instance.pk).open
    assert activation_before.state == activation.state


def test_review_task_writes_an_execution_audit_that_the_workflow_audit_references(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    receipt = rq.run(task_review, recoverer, state, rq.review(state))
    workflow_audit = state.operations().get()
    execution_audit = ExecutionAudit.objects.get(task=state.task)
    assert workflow_audit.execution_audit_id == execution_audit.id
    assert workflow_audit.operation_id != execution_audit.operation_id
    assert receipt.data["operation_id"] == workflow_audit.operation_id
    assert receipt.data["execution_operation_id"] == execution_audit.operation_id
    assert (workflow_audit.action, execution_audit.action) == ("workflow.review_task", "task.review")
    assert execution_audit.before["state"] == "NEEDS_REVIEW" and execution_audit.after["state"] == "SUCCEEDED"
    assert workflow_audit.reason == rq.REASON and execution_audit.evidence_ref == rq.EVIDENCE
    assert workflow_audit.step_key == "charge" and workflow_audit.activation_id == state.activation.id
    assert list(receipt.data) == [
        "operation_id",
        "execution_operation_id",
        "operation",
        "workflow_id",
        "revision",
        "control_revision",
        "state",
        "paused",
        "step_key",
        "activation_id",
        "activation_sequence",
        "task_id",
    ]


def test_review_task_publishes_the_reviewed_event_last_with_the_new_task_revision(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    with CaptureQueriesContext(connection) as queries:
        rq.run(task_review, recoverer, state, rq.review(state))
    event = ResultEvent.objects.get(task=state.task, kind=ResultKind.REVIEWED)
    task = Task.objects.get(pk=state.task.pk)
    assert (event.seq, event.outcome, event.result, event.task_revision) == (2, "SUCCEEDED", task.result, task.revision)
    record = InboxRecord.objects.get(source_id=event.id)
    assert record.state == InboxState.PENDING and record.activation_id == state.activation.id
    # The timeline's own inserts follow each write in its transaction: they are not part of the stream.
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].split()[0] in ("INSERT", "UPDATE") and "history_instanceevent" not in q["sql"]
    ]
    assert "history_resultevent" in writes[-2] and "history_inboxrecord" in writes[-1]


def test_a_query_success_answering_pending_is_not_a_poll_success(tenancy, recoverer):
    state = states.poll_rounds_exhausted_state(tenancy)
    task = state.task
    Task.objects.filter(pk=task.pk).update(state=TaskState.NEEDS_REVIEW, permit_held=True)
    states.quota_sync(state)
    rq.run(task_review, recoverer, state, rq.review(state, result={"status": "WAITING"}))
    assert Step.objects.get(pk=state.step.pk).state == "NEEDS_REVIEW"
    assert Activation.objects.get(pk=state.activation.pk).state == "NEEDS_REVIEW"


def test_review_task_refuses_a_task_that_is_not_in_review(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "FAILED_PRECONDITION")


def test_review_task_refuses_a_task_with_a_running_attempt(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    Attempt.objects.filter(task=state.task).update(state=AttemptState.RUNNING)
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "FAILED_PRECONDITION")


def test_review_task_refuses_a_task_of_another_instance(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    other = states.task_unknown_state(tenancy)
    command = rq.review(state, task_id=other.task.id, expected_task_revision=str(other.task.revision))
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "NOT_FOUND")


def test_review_task_refuses_a_task_its_source_activation_does_not_name(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    Activation.objects.filter(pk=state.activation.pk).update(task_id="f" * 32)
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "UNAVAILABLE")


def test_review_task_refuses_a_task_on_another_queue(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    namespace, _, _ = tenancy
    ledger = Queue.objects.create(namespace=namespace, name="ledger")
    Task.objects.filter(pk=state.task.pk).update(queue=ledger)
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "UNAVAILABLE")
