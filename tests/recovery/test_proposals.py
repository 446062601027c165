"""Four-eyes approval: a policy turns a submit into a proposal; another person approves or rejects it."""

import hashlib
import json

import pytest
from django.apps import apps
from django.db import connection

from core import exactjson
from engine.instances import instance_pause
from engine.runner import pass_proposal_expiry
from history.credentials import identity_of_credential
from history.models import ApprovalPolicy, Proposal, ProposalState, Scope, Task, WorkflowInstance
from recovery.consequences import operation_consequences
from recovery.operations import step_retry
from recovery.proposals import proposal_approve, proposal_reject
from testkit import requests as rq
from testkit import states
from tests.conftest import bearer
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db
OTHER = "b" * 32
# What a proposal and its decisions may write: the proposal, its audit rows, their timeline events, the key.
PROPOSAL_TABLES = {
    "history_proposal",
    "history_workflowoperation",
    "history_instanceevent",
    "history_idempotencyreceipt",
}


def engine_digest() -> str:
    """Every history table but the ones a proposal may write: equal digests mean the engine did not move."""
    digest = hashlib.sha256()
    with connection.cursor() as cursor:
        for model in sorted(apps.get_app_config("history").get_models(), key=lambda m: m._meta.db_table):
            if model._meta.db_table in PROPOSAL_TABLES:
                continue
            table, pk = (connection.ops.quote_name(n) for n in (model._meta.db_table, model._meta.pk.column))
            cursor.execute(f"SELECT * FROM {table} ORDER BY {pk}")
            digest.update(repr(cursor.fetchall()).encode())
    return digest.hexdigest()


@pytest.fixture
def policy(tenancy):
    namespace, _, _ = tenancy
    return ApprovalPolicy.objects.create(namespace=namespace, operation="retry-step", approvals_required=1)


@pytest.fixture
def approver(issue_token):
    return identity_of_credential(issue_token(scopes=[Scope.RECOVER, Scope.READ], actor_id=OTHER).credential)


def _proposed(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    before = engine_digest()
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state), key="propose")
    assert engine_digest() == before
    return state, receipt, Proposal.objects.get(pk=receipt.data["proposal_id"])


def _approve(identity, state, proposal, key="approve", command=None):
    return proposal_approve(
        identity=identity,
        instance_id=state.instance.id,
        proposal_id=proposal.id,
        idempotency_key=key,
        command={} if command is None else command,
    )


def _reject(identity, state, proposal, key="reject", reason="the customer was refunded instead"):
    return proposal_reject(
        identity=identity,
        instance_id=state.instance.id,
        proposal_id=proposal.id,
        idempotency_key=key,
        command={"reason": reason},
    )


def test_a_policy_turns_a_submit_into_a_proposal_holding_the_exact_command_and_its_preview(tenancy, recoverer, policy):
    state, receipt, proposal = _proposed(tenancy, recoverer)
    assert receipt.status == 202 and not receipt.replayed
    assert receipt.data["state"] == "PENDING" and receipt.data["operation"] == "retry-step"
    assert receipt.data["proposed_by"] == recoverer.actor_id
    assert exactjson.loads(proposal.command) == rq.retry(state)
    assert proposal.expected_revision == state.instance.revision
    revision = state.instance.revision
    assert proposal.preview["instance"]["revision"] == {"before": str(revision), "after": str(revision + 1)}
    assert [o.action for o in state.operations()] == ["workflow.proposal_created"]
    replay = rq.run(step_retry, recoverer, state, rq.retry(state), key="propose")
    assert (replay.status, replay.text, replay.replayed) == (202, receipt.text, True)
    assert Proposal.objects.count() == 1


def test_the_most_specific_policy_decides(tenancy, recoverer):
    namespace, _, _ = tenancy
    state = states.task_failed_state(tenancy)
    ApprovalPolicy.objects.create(namespace=namespace, approvals_required=1)
    ApprovalPolicy.objects.create(
        namespace=namespace, definition_name=state.definition.name, operation="retry-step", approvals_required=0
    )
    receipt = rq.run(step_retry, recoverer, state, rq.retry(state))
    assert receipt.status == 200 and Proposal.objects.count() == 0


def test_a_command_that_fails_its_checks_makes_no_proposal(tenancy, recoverer, policy):
    state = states.task_failed_state(tenancy)
    stale = rq.retry(state, expected_revision=str(state.instance.revision + 1))
    assert_refused(lambda: rq.run(step_retry, recoverer, state, stale), "ABORTED")


def test_the_proposer_cannot_approve_not_even_through_a_second_token(tenancy, recoverer, policy, issue_token):
    state, _, proposal = _proposed(tenancy, recoverer)
    second = identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id=recoverer.actor_id).credential)
    assert second.credential_id != recoverer.credential_id
    for identity in (recoverer, second):
        assert_refused(lambda i=identity: _approve(i, state, proposal), "PERMISSION_DENIED")


def test_approval_runs_the_stored_command_and_the_audit_names_proposer_and_approver(
    tenancy, recoverer, policy, approver
):
    state, _, proposal = _proposed(tenancy, recoverer)
    receipt = _approve(approver, state, proposal, command={"reason": "checked with finance"})
    assert receipt.status == 200 and receipt.data["proposal_id"] == proposal.id
    assert Task.objects.get(pk=receipt.data["task_id"]).state == "QUEUED"
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == state.instance.revision + 1
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by, proposal.decision_reason) == (
        ProposalState.APPROVED,
        OTHER,
        "checked with finance",
    )
    effect = state.operations().get(action="workflow.retry_step")
    assert effect.actor_id == OTHER and effect.reason == rq.REASON
    assert effect.after["proposal"] == {"id": proposal.id, "proposed_by": recoverer.actor_id, "approved_by": OTHER}
    assert proposal.operation_id == effect.operation_id
    assert state.operations().filter(action="workflow.proposal_approved").count() == 1
    states.assert_invariants(state)


def test_a_second_approval_is_refused_and_its_key_replays_the_first(tenancy, recoverer, policy, approver, issue_token):
    state, _, proposal = _proposed(tenancy, recoverer)
    first = _approve(approver, state, proposal)
    assert _approve(approver, state, proposal).text == first.text
    third = identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id="c" * 32).credential)
    error = assert_refused(lambda: _approve(third, state, proposal, key="again"), "FAILED_PRECONDITION")
    assert "already APPROVED" in error.message


def test_approval_after_the_instance_moved_is_stale_and_writes_nothing(
    tenancy, recoverer, policy, approver, issue_token
):
    state, _, proposal = _proposed(tenancy, recoverer)
    control = identity_of_credential(issue_token(scopes=[Scope.CONTROL], actor_id="c" * 32).credential)
    state.instance.refresh_from_db()
    instance_pause(
        identity=control,
        instance_id=state.instance.id,
        command={"expected_control_revision": str(state.instance.control_revision), "reason": "maintenance"},
    )
    error = assert_refused(lambda: _approve(approver, state, proposal), "ABORTED")
    assert "propose it again" in error.message
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING


def test_rejection_leaves_no_trace_beyond_the_audit(tenancy, recoverer, policy, approver):
    state, _, proposal = _proposed(tenancy, recoverer)
    before = engine_digest()
    receipt = _reject(approver, state, proposal)
    assert receipt.data["state"] == "REJECTED" and receipt.data["decided_by"] == OTHER
    assert engine_digest() == before
    audit = state.operations().get(action="workflow.proposal_rejected")
    assert audit.reason == "the customer was refunded instead" and audit.before["proposal"]["state"] == "PENDING"
    assert_refused(lambda: _approve(approver, state, proposal), "FAILED_PRECONDITION")


def test_the_proposer_may_withdraw_and_a_rejection_needs_a_reason(tenancy, recoverer, policy):
    state, _, proposal = _proposed(tenancy, recoverer)
    assert_refused(lambda: _reject(recoverer, state, proposal, reason=""), "INVALID_ARGUMENT", field="reason")
    assert _reject(recoverer, state, proposal).data["state"] == "REJECTED"


def test_an_expired_proposal_cannot_be_approved_and_the_runner_closes_it_with_an_audit(
    tenancy, recoverer, policy, approver, settings
):
    settings.WEAVE_PROPOSAL_TTL_SECONDS = 0
    state, _, proposal = _proposed(tenancy, recoverer)
    error = assert_refused(lambda: _approve(approver, state, proposal), "FAILED_PRECONDITION")
    assert "expired" in error.message
    before = engine_digest()
    assert pass_proposal_expiry() == 1
    assert engine_digest() == before
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.EXPIRED
    assert state.operations().filter(action="workflow.proposal_expired", actor_id="engine").count() == 1
    assert pass_proposal_expiry() == 0


def test_a_proposal_of_another_instance_is_not_found(tenancy, recoverer, policy, approver):
    state, _, proposal = _proposed(tenancy, recoverer)
    other = states.task_failed_state(tenancy)
    assert_refused(lambda: _approve(approver, other, proposal), "NOT_FOUND", field="proposal_id")


def test_the_consequence_preview_shows_the_effect_under_a_policy(tenancy, recoverer, policy):
    state = states.task_failed_state(tenancy)
    before = engine_digest()
    changes = operation_consequences(
        identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=rq.retry(state)
    )
    assert ("tasks queued or running", "0", "1") in changes
    assert engine_digest() == before and Proposal.objects.count() == 0


def _post(api, token, url, body, key):
    return api.post(
        url, data=json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY=key, **bearer(token)
    )


def test_over_http_a_submit_answers_202_and_another_person_approves(tenancy, policy, issue_token, api):
    state = states.task_failed_state(tenancy)
    proposer = issue_token(scopes=[Scope.RECOVER]).token
    second = issue_token(scopes=[Scope.RECOVER], actor_id=OTHER).token
    base = f"/v1/workflows/{state.instance.id}"
    proposed = _post(api, proposer, f"{base}/recovery/retry-step", rq.retry(state), "k1")
    assert proposed.status_code == 202, proposed.content
    proposal_id = proposed.json()["data"]["proposal_id"]
    # No body at all is not the empty command: nothing is approved by a request that sent none.
    bare = api.post(f"{base}/proposals/{proposal_id}/approve", HTTP_IDEMPOTENCY_KEY="k0", **bearer(second))
    assert (bare.status_code, bare.json()["error"]["field"]) == (400, "body")
    own = _post(api, proposer, f"{base}/proposals/{proposal_id}/approve", {}, "k2")
    assert (own.status_code, own.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
    approved = _post(api, second, f"{base}/proposals/{proposal_id}/approve", {}, "k3")
    assert approved.status_code == 200 and approved.json()["data"]["proposal_id"] == proposal_id
    replayed = _post(api, second, f"{base}/proposals/{proposal_id}/approve", {}, "k3")
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed.json()["data"] == approved.json()["data"]
    unknown = _post(api, second, f"{base}/proposals/{proposal_id}/approve", {"note": "x"}, "k4")
    assert (unknown.status_code, unknown.json()["error"]["field"]) == (400, "note")
