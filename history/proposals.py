"""Four-eyes approval: which operations need a second person, and the proposals that wait for one.

A proposal is the exact command an operator submitted where a policy requires approval, with the
preview it was checked at. Only the recovery pipeline creates and approves one (it runs the same
checks then as for any command); rejection and the runner's expiry only close it. Every one of
these writes a workflow audit row and nothing else: the engine's rows and revisions never move.
"""

import datetime as dt

from django.conf import settings

from core import clock
from core.errors import FailedPrecondition, NotFound, PermissionDenied
from core.identity import Identity
from core.times import format_time
from history.audits import audit_write
from history.locking import Level, LockSet
from history.models import ApprovalPolicy, Proposal, ProposalState, WorkflowInstance, WorkflowOperation
from history.selectors.access import instance_get_readable

# The audit actor of what the runner decides by itself (an expiry).
ENGINE_ACTOR = "engine"


def approvals_required(*, namespace_id: str, definition_name: str, operation: str) -> int:
    """The most specific policy's count: definition and operation, then definition, then operation, then any."""
    rows = ApprovalPolicy.objects.filter(
        namespace_id=namespace_id, definition_name__in=[definition_name, ""], operation__in=[operation, ""]
    ).values_list("definition_name", "operation", "approvals_required")
    ranked = sorted(rows, key=lambda row: (row[0] == "", row[1] == ""))
    return ranked[0][2] if ranked else 0


def proposal_expiry(now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(seconds=settings.WEAVE_PROPOSAL_TTL_SECONDS)


def proposal_snapshot(proposal: Proposal) -> dict:
    """A proposal as the API answers it and the audit records it."""
    return {
        "proposal_id": proposal.id,
        "workflow_id": proposal.workflow_id,
        "operation": proposal.operation,
        "state": proposal.state,
        "expected_revision": str(proposal.expected_revision),
        "proposed_by": proposal.proposed_by,
        "reason": proposal.reason,
        "evidence_ref": proposal.evidence_ref,
        "created_at": format_time(proposal.created_at),
        "expires_at": format_time(proposal.expires_at),
        "decided_by": proposal.decided_by,
        # Absent, never null, while it waits (as every optional member of the API's answers).
        **({"decided_at": format_time(proposal.decided_at)} if proposal.decided_at else {}),
    }


def proposal_held(*, locks: LockSet, identity: Identity, instance_id: str, proposal_id: str) -> Proposal:
    """The proposal, locked, if it is this instance's and still open; else NOT_FOUND or FAILED_PRECONDITION.

    The instance is looked up first (unlocked: its lock comes after the proposal's), so an instance the caller
    may not see answers exactly as a missing one, whatever its proposals."""
    instance_get_readable(identity=identity, instance_id=instance_id)
    proposal: Proposal | None = locks.lock_one(Level.PROPOSAL, proposal_id)
    if proposal is None or proposal.namespace_id != identity.namespace_id or proposal.workflow_id != instance_id:
        raise NotFound(f"no proposal {proposal_id} of this workflow", field="proposal_id")
    if proposal.state != ProposalState.PENDING:
        raise FailedPrecondition(f"the proposal is already {proposal.state}")
    if proposal.expires_at <= clock.now():
        raise FailedPrecondition(f"the proposal expired at {format_time(proposal.expires_at)}; propose it again")
    return proposal


def proposal_operation(*, namespace_id: str, instance_id: str, proposal_id: str) -> str | None:
    """The operation a proposal of this instance holds (it never changes, so no lock), for counting its
    approval; None when there is no such proposal."""
    rows = Proposal.objects.filter(pk=proposal_id, namespace_id=namespace_id, workflow_id=instance_id)
    return rows.values_list("operation", flat=True).first()


def approver_check(proposal: Proposal, identity: Identity) -> None:
    """Four eyes: whoever proposed may not approve, through any of their credentials or logins."""
    if proposal.proposed_by == identity.actor_id:
        raise PermissionDenied("a proposal needs a second person: its proposer cannot approve it")


def proposal_close(
    *,
    proposal: Proposal,
    instance: WorkflowInstance,
    state: ProposalState,
    actor_id: str,
    reason: str = "",
    request_id: str = "",
    operation_id: str = "",
) -> WorkflowOperation:
    """Record the decision on the locked proposal, and its audit; the caller holds the instance lock."""
    before = proposal_snapshot(proposal)
    now = clock.now()
    proposal.state = state
    proposal.decided_by = actor_id
    proposal.decided_at = now
    proposal.decision_reason = reason
    proposal.operation_id = operation_id
    proposal.save(update_fields=["state", "decided_by", "decided_at", "decision_reason", "operation_id"])
    return audit_write(
        model=WorkflowOperation,
        namespace_id=proposal.namespace_id,
        actor_id=actor_id,
        action=f"workflow.proposal_{state.lower()}",
        reason=reason,
        request_id=request_id,
        before={"proposal": before},
        after={"proposal": proposal_snapshot(proposal)},
        now=now,
        workflow=instance,
    )
