"""The SDK end to end against a live server, on rows built with the factories."""

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from weave_sdk import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RawJSON,
    Unauthenticated,
    WeaveClient,
)

from history.models import (
    ActivationState,
    ApprovalPolicy,
    AttemptState,
    InstanceEvent,
    Operator,
    Scope,
    WorkflowInstance,
    WorkflowOperation,
)
from testkit import requests as rq
from testkit import states
from testkit.driver import Engine, task_step
from tests.factories import (
    AttemptFactory,
    SignalOperationFactory,
    WorkflowOperationFactory,
    accept_signal,
    activate,
    poll_round,
    step_of,
)

pytestmark = pytest.mark.django_db(transaction=True)
CONTROLS = ("workflow.pause", "workflow.resume", "workflow.cancel")
ALICE, BOB = "a1" * 16, "b2" * 16


@pytest.fixture
def recovered(workflow):
    """A TASK step recovered twice, a POLL round re-run in a second activation, a signal and its audit."""
    charge = step_of(workflow, "charge")
    activate(charge, state=ActivationState.FAILED)
    activate(charge, state=ActivationState.FAILED)
    current = activate(charge, input='{"amount":1.10}', output="null")
    AttemptFactory(task=current.task, state=AttemptState.UNKNOWN)
    settle = step_of(workflow, "settle")
    first = activate(settle, state=ActivationState.FAILED)
    poll_round(first, 1)
    second = activate(settle)
    poll_round(second, 1)
    signal, acceptance = accept_signal(workflow, payload='{"n":12345678901234567890123}')
    SignalOperationFactory(signal=signal)
    WorkflowOperationFactory(workflow=workflow, action="workflow.retry_step", step_key="charge")
    return {
        "workflow": workflow,
        "current": current,
        "polls": [first, second],
        "signal": signal,
        "acceptance": acceptance,
    }


def _client(live_server, issue_token, scope):
    return WeaveClient(live_server.url, issue_token(scopes=[scope]).token)


def test_the_sdk_reads_the_whole_history_of_a_recovered_workflow(live_server, issue_token, recovered):
    workflow_id = recovered["workflow"].id
    with _client(live_server, issue_token, Scope.READ) as client:
        workflow = client.get_workflow(workflow_id)
        assert [s.key for s in workflow.steps] == ["charge", "settle", "approve", "cool-off"]
        assert workflow.revision == 1 and workflow.eligibility["continue"]["possible"] is False
        charge = workflow.steps[0]
        assert charge.current_activation.sequence == 3 and charge.current_activation.task.revision == 1

        activations = list(client.iter_items(client.list_workflow_activations, workflow_id, "charge", limit=1))
        assert [a.sequence for a in activations] == [3, 2, 1]
        for activation in activations:
            detail = client.get_workflow_activation(workflow_id, "charge", activation.id)
            assert detail.activation == activation
            assert detail.step == charge
        latest = client.get_workflow_activation(workflow_id, "charge", activations[0].id)
        assert (latest.input, latest.output) == (RawJSON('{"amount":1.10}'), RawJSON("null"))
        assert client.get_workflow_activation(workflow_id, "charge", activations[1].id).output is None

        rounds = [client.list_workflow_poll_rounds(workflow_id, "settle", poll.id).items for poll in recovered["polls"]]
        assert [[r.round for r in items] for items in rounds] == [[1], [1]]
        assert rounds[0][0].task_id != rounds[1][0].task_id

        (signal,) = client.list_workflow_signals(workflow_id, limit=None, cursor="").items
        full = client.get_workflow_signal(workflow_id, signal.id)
        assert full.payload == RawJSON('{"n":12345678901234567890123}') and full.revision == 1

        task = client.get_workflow_task(workflow_id, recovered["current"].task_id)
        assert [(a.number, a.state) for a in task.task.attempts] == [(1, "UNKNOWN")]
        assert task.task.activation_sequence == 3

        with pytest.raises(PermissionDenied) as refused:
            client.list_workflow_operations(workflow_id)
        assert refused.value.status == 403 and len(refused.value.request_id) == 32


def test_the_sdk_reads_the_signal_audit_with_audit_access(live_server, issue_token, recovered):
    workflow_id, signal = recovered["workflow"].id, recovered["signal"]
    with _client(live_server, issue_token, Scope.AUDIT_READ) as client:
        pages = list(client.iter_pages(client.list_workflow_signal_operations, workflow_id, signal.id, limit=1))
        assert len(pages) == 2 and pages[-1].next_cursor is None
        acceptance = client.get_workflow_signal_operation(workflow_id, signal.id, recovered["acceptance"].id)
        assert acceptance.before == RawJSON("null")
        assert acceptance.after.value()["state"] == "PENDING"
        (operation,) = client.list_workflow_operations(workflow_id).items
        assert (operation.action, operation.step_key) == ("workflow.retry_step", "charge")


def test_server_refusals_reach_the_caller_with_code_field_and_request_id(live_server, issue_token, recovered):
    workflow_id = recovered["workflow"].id
    with _client(live_server, issue_token, Scope.READ) as client:
        with pytest.raises(NotFound) as missing:
            client.get_workflow("e" * 32)
        assert (missing.value.code, missing.value.status) == ("NOT_FOUND", 404)
        with pytest.raises(InvalidArgument) as forged:
            client.list_workflow_signals(workflow_id, cursor="forged:cursor")
        assert (forged.value.field, forged.value.status) == ("cursor", 400)
    with _client(live_server, issue_token, Scope.AUDIT_READ) as auditor, pytest.raises(NotFound):
        by_operation_id = recovered["acceptance"].operation_id
        auditor.get_workflow_signal_operation(workflow_id, recovered["signal"].id, by_operation_id)


def test_the_sdk_reads_a_tasks_source_as_a_reader_and_as_the_worker_of_its_queue(live_server, issue_token, recovered):
    workflow_id = recovered["workflow"].id
    second = recovered["polls"][1]
    query_task = second.last_task_id
    for scope in (Scope.READ, Scope.TASKS_WORK):
        with _client(live_server, issue_token, scope) as client:
            source = client.get_task_source(query_task)
            assert (source.instance_id, source.step_key, source.queue) == (workflow_id, "settle", "payments")
            assert (source.activation.id, source.activation.sequence, source.poll_round.round) == (second.id, 2, 1)
            assert source.links.rounds.endswith(f"/activations/{second.id}/rounds")
            with pytest.raises(NotFound):
                client.get_task_source("e" * 32)
    with _client(live_server, issue_token, Scope.READ) as client:
        history = client.get_workflow_task(workflow_id, recovered["current"].task_id)
        assert history.task.late_evidence == [] and history.task.links.source.endswith("/source")


def test_the_sdk_walks_an_engine_built_timeline_with_its_filters(live_server, issue_token, tenancy):
    state = states.task_reviewed_state(tenancy)
    stored = InstanceEvent.objects.filter(instance=state.instance)
    with _client(live_server, issue_token, Scope.READ) as client:
        events = list(client.iter_workflow_events(state.instance.id, order="desc", limit=7))
        assert [e.sequence for e in events] == list(range(stored.count(), 0, -1))
        first = events[-1]
        assert (first.kind, first.before, first.after, first.subject.type) == (
            "instance.created",
            None,
            "RUNNING",
            "instance",
        )
        tasks = list(
            client.iter_workflow_events(state.instance.id, kind=["task.state"], step_key=state.step.key, limit=1)
        )
        assert [(e.before, e.after) for e in tasks] == list(
            stored.filter(kind="task.state").order_by("sequence").values_list("before", "after")
        )
        assert all(e.links.task == f"/v1/workflows/{state.instance.id}/tasks/{state.task.id}" for e in tasks)
        with pytest.raises(InvalidArgument) as refused:
            client.list_workflow_events(state.instance.id, kind="task.done")
        assert refused.value.field == "kind" and refused.value.status == 400


def test_the_sdk_finds_the_instances_in_review_and_counts_them(live_server, issue_token, workflow):
    import datetime as dt

    from core import clock
    from history.models import InstanceState, ReviewCause
    from tests.factories import WorkflowInstanceFactory

    since = clock.now() - dt.timedelta(hours=2)
    in_review = [
        WorkflowInstanceFactory(
            namespace=workflow.namespace,
            definition=workflow.definition,
            state=InstanceState.NEEDS_REVIEW,
            review_cause=ReviewCause.WAIT_EXPIRED,
            review_since=since + dt.timedelta(seconds=i),
        )
        for i in range(3)
    ]
    with _client(live_server, issue_token, Scope.READ) as client:
        found = list(client.iter_workflows(review_cause=["wait_expired"], order="review_since", limit=2))
        assert [item.id for item in found] == [row.id for row in reversed(in_review)]
        assert client.list_workflows(state="RUNNING").items[0].id == workflow.id
        summary = client.review_summary()
        assert summary.total == 3 and summary.causes[0].count == 3
        with pytest.raises(InvalidArgument) as caught:
            client.list_workflows(state="RUNNING", cursor="forged")
        assert caught.value.field == "cursor"


def test_the_sdk_gets_a_proposal_where_a_policy_holds_the_operation_and_a_second_person_approves_it(
    live_server, issue_token, tenancy
):
    state = states.task_failed_state(tenancy)
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="retry-step")
    proposer = WeaveClient(live_server.url, issue_token(scopes=[Scope.RECOVER]).token)
    approver = WeaveClient(live_server.url, issue_token(scopes=[Scope.RECOVER], actor_id="b" * 32).token)
    with proposer, approver:
        held = proposer.retry_step(state.instance.id, idempotency_key="sdk-p", command=rq.retry(state))
        assert held.status == 202 and held.data.state == "PENDING"
        assert held.data.expected_revision == state.instance.revision
        with pytest.raises(PermissionDenied):
            proposer.approve_proposal(state.instance.id, held.data.proposal_id, idempotency_key="sdk-a0")
        done = approver.approve_proposal(
            state.instance.id, held.data.proposal_id, idempotency_key="sdk-a1", reason="checked"
        )
        assert done.status == 200 and done.data.proposal_id == held.data.proposal_id and done.data.task_id


def test_the_sdk_starts_pauses_resumes_and_cancels_an_instance(live_server, issue_token, tenancy):
    definition = Engine(*tenancy).define([task_step("charge")])
    command = {"definition": definition.name, "version": definition.version, "input": RawJSON('{"amount":1.10}')}
    with (
        _client(live_server, issue_token, Scope.WRITE) as starter,
        _client(live_server, issue_token, Scope.CONTROL) as controller,
    ):
        workflow_id = starter.start_workflow(idempotency_key="sdk-start", command=command).data["id"]
        started = WorkflowInstance.objects.get(pk=workflow_id)
        paused = controller.pause_workflow(
            workflow_id, expected_control_revision=started.control_revision, reason="maintenance window"
        )
        assert (paused.id, paused.state, paused.paused) == (workflow_id, "RUNNING", True)
        assert (paused.control_revision, paused.revision) == (started.control_revision + 1, started.revision + 1)
        with pytest.raises(Conflict) as stale:
            controller.resume_workflow(workflow_id, expected_control_revision=started.control_revision)
        assert (stale.value.code, stale.value.field, stale.value.status) == (
            "ABORTED",
            "expected_control_revision",
            409,
        )
        resumed = controller.resume_workflow(workflow_id, expected_control_revision=paused.control_revision)
        assert resumed.paused is False and resumed.control_revision == paused.control_revision + 1
        cancelled = controller.cancel_workflow(
            workflow_id, expected_control_revision=resumed.control_revision, reason="customer withdrew"
        )
        assert (cancelled.state, cancelled.stop_kind, cancelled.paused) == ("CANCELLING", "CANCEL", False)
    stored = WorkflowInstance.objects.get(pk=workflow_id)
    assert (stored.state, stored.stop_kind, stored.control_revision, stored.revision) == (
        "CANCELLING",
        "CANCEL",
        cancelled.control_revision,
        cancelled.revision,
    )
    controls = WorkflowOperation.objects.filter(workflow_id=workflow_id, action__in=CONTROLS)
    assert sorted(controls.values_list("action", flat=True)) == sorted(CONTROLS)


def test_the_sdk_notes_acknowledges_and_assigns_a_review_without_changing_the_instance(
    live_server, issue_token, tenancy
):
    review = states.task_unknown_state(tenancy)
    workflow_id, revision = review.instance.id, review.instance.revision
    user = User.objects.create_user("bob", is_staff=True)
    Operator.objects.create(user=user, namespace=tenancy[0], actor_id=BOB, queue_access="*")
    annotator = WeaveClient(live_server.url, issue_token(scopes=[Scope.ANNOTATE], actor_id=ALICE).token)
    with annotator, _client(live_server, issue_token, Scope.READ) as reader:
        first = annotator.add_workflow_note(workflow_id, idempotency_key="sdk-n1", text="provider says pending")
        assert (first.status, first.replayed, first.data.author, first.data.corrects) == (201, False, ALICE, None)
        again = annotator.add_workflow_note(workflow_id, idempotency_key="sdk-n1", text="provider says pending")
        assert (again.status, again.replayed, again.data) == (201, True, first.data)
        second = annotator.add_workflow_note(
            workflow_id,
            idempotency_key="sdk-n2",
            text="provider says PAID, not pending",
            evidence_ref="ticket:OPS-9",
            corrects=first.data.id,
        )
        assert (second.data.corrects, second.data.evidence_ref) == (first.data.id, "ticket:OPS-9")
        with pytest.raises(NotFound) as missing:
            annotator.add_workflow_note(workflow_id, idempotency_key="sdk-n3", text="x", corrects="e" * 32)
        assert missing.value.field == "corrects"

        acknowledged = annotator.acknowledge_workflow(workflow_id)
        assert (acknowledged.acknowledged_by, acknowledged.assignee) == (ALICE, None)
        assigned = annotator.assign_workflow(workflow_id, assignee=BOB)
        assert (assigned.assignee, assigned.assigned_by, assigned.acknowledged_by) == (BOB, ALICE, ALICE)
        with pytest.raises(NotFound) as stranger:
            annotator.assign_workflow(workflow_id, assignee="c" * 32)
        assert (stranger.value.field, stranger.value.status) == ("assignee", 404)

        pages = list(reader.iter_pages(reader.list_workflow_notes, workflow_id, limit=1))
        assert [[note.id for note in page.items] for page in pages] == [[second.data.id], [first.data.id]]
        assert pages[0].items[0] == second.data and pages[0].attention == assigned
        assert {page.revision for page in pages} == {revision}
        assert annotator.assign_workflow(workflow_id, assignee="").assignee is None
    stored = WorkflowInstance.objects.get(pk=workflow_id)
    assert (stored.state, stored.revision) == ("NEEDS_REVIEW", revision)


def test_the_sdk_reads_who_its_token_acts_as(live_server, issue_token):
    issued = issue_token(scopes=[Scope.READ, Scope.CONTROL], queues=["payments"], actor_id="c" * 32)
    with WeaveClient(live_server.url, issued.token) as client:
        me = client.get_credential_self()
    credential = issued.credential
    assert (me.credential_id, me.namespace_id, me.actor_id) == (credential.id, credential.namespace_id, "c" * 32)
    assert (me.scopes, me.queues) == (["workflows:control", "workflows:read"], ["payments"])
    with _client(live_server, issue_token, Scope.TASKS_WORK) as worker:
        assert worker.get_credential_self().queues == "*"
    stranger = WeaveClient(live_server.url, "weave_" + "0" * 16 + "_" + "x" * 43)
    with stranger, pytest.raises(Unauthenticated) as refused:
        stranger.get_credential_self()
    assert refused.value.status == 401


def test_the_sdk_reads_the_api_index_whatever_its_token(live_server, issue_token):
    with WeaveClient(live_server.url, "weave_" + "0" * 16 + "_" + "x" * 43) as stranger:
        index = stranger.get_api_index()
    assert (index.name, index.version, index.links.workflows) == ("Weave API", "1", "/v1/workflows")
    with _client(live_server, issue_token, Scope.READ) as reader:
        assert reader.get_api_index() == index


def test_the_sdk_reads_the_background_a_runner_run_left(live_server, issue_token, engine):
    call_command("weave_runner", "--once")
    with _client(live_server, issue_token, Scope.READ) as reader:
        background = reader.get_background()
    [runner] = background.processes
    assert (runner.kind, runner.passes, runner.stale) == ("runner", 1, False) and runner.stopped_at is not None
    assert (background.summary.runners_alive, background.summary.stale) == (0, 0)  # it stopped: no runner is alive
    with _client(live_server, issue_token, Scope.CONTROL) as controller, pytest.raises(PermissionDenied):
        controller.get_background()


def test_the_sdk_makes_a_campaign_and_follows_it_from_start_to_its_ledger(live_server, issue_token, tenancy):
    from engine.runner import runner_settle
    from tests.recovery.test_campaigns import _command, _unknown

    named = [instance.id for instance in _unknown(tenancy, 3)]
    command = _command(canary_size=3) | {"selection": {"workflows": named}}
    with WeaveClient(live_server.url, issue_token(scopes=[Scope.RECOVER, Scope.READ]).token) as client:
        made = client.make_campaign(idempotency_key="inc-42", command=command)
        campaign = made.data
        assert (made.status, made.replayed, campaign.state, campaign.total) == (201, False, "READY", 3)
        again = client.make_campaign(idempotency_key="inc-42", command=command)
        assert (again.status, again.replayed, again.data.id) == (200, True, campaign.id)
        listed = client.list_campaigns().items
        assert [c.id for c in listed] == [campaign.id] and listed[0].counts.PENDING == 3
        assert client.start_campaign(campaign.id, note="preview read").state == "RUNNING"
        runner_settle()
        done = client.get_campaign(campaign.id)
        assert (done.state, done.counts.APPLIED, done.finished_at is not None) == ("DONE", 3, True)
        ledger = list(client.iter_items(client.list_campaign_items, campaign.id, limit=2, outcome="APPLIED"))
        assert [item.position for item in ledger] == [0, 1, 2] and all(item.decision_id for item in ledger)
        with pytest.raises(FailedPrecondition, match="a DONE campaign cannot be paused"):
            client.pause_campaign(campaign.id)
        with pytest.raises(NotFound):
            client.get_campaign("e" * 32)
