"""A second person's decision on a recovery proposal: approve (the operation runs) or reject (nothing runs).

Both are commands of their own with an Idempotency-Key, scope workflows:recover, and one transaction in
the fixed lock order (key → proposal → instance). Where a policy holds an operation back, its service
answers the proposal (202) instead of committing; see ``recovery.pipeline``.
"""

from core import fields as field_rules
from core.identity import Identity
from history import idempotency
from history.events import acting_for
from history.idempotency import Receipt, receipt_freeze
from history.locking import Level, LockSet
from history.models import ProposalState, Scope
from history.proposals import proposal_close, proposal_held, proposal_operation, proposal_snapshot
from recovery.commands import instance_id_check
from recovery.operations import OPERATIONS
from recovery.pipeline import APPROVE, approval_commit, key_held, key_retried, operation_counted

REJECT = "proposal.reject"
# The decision's own words: optional on approval (the proposal carries the reason), required to reject.
DECISION_FIELDS = ("reason",)


def _decision(decision: str, identity: Identity, instance_id: str, proposal_id: str, key: str, command: object):
    """The decision's checks before anything is read (scope, ids, key, body); its reason and fingerprint."""
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    field_rules.identifier("proposal_id", proposal_id)
    idempotency.key_check(key)
    given = field_rules.command_object(command, allowed=DECISION_FIELDS)
    reason = ""
    if "reason" in given or decision == REJECT:
        reason = field_rules.reason("reason", field_rules.required(given, "reason"))
    return reason, idempotency.fingerprint(operation=decision, target=proposal_id, command=given)


def proposal_approve(
    *, identity: Identity, instance_id: str, proposal_id: str, idempotency_key: str, command: object, request_id=""
) -> Receipt:
    """Run the proposal's stored command as its approver: the operation's receipt, with ``proposal_id``."""
    note, fingerprint = _decision(APPROVE, identity, instance_id, proposal_id, idempotency_key, command)

    def commit() -> Receipt:
        return key_retried(
            lambda: approval_commit(
                operations=OPERATIONS,
                identity=identity,
                instance_id=instance_id,
                proposal_id=proposal_id,
                key=idempotency_key,
                fingerprint=fingerprint,
                note=note,
                request_id=request_id,
            )
        )

    # Counted as the operation it runs; an approval of no such proposal runs none.
    operation = proposal_operation(namespace_id=identity.namespace_id, instance_id=instance_id, proposal_id=proposal_id)
    return commit() if operation is None else operation_counted(operation=operation, run=commit)


def proposal_reject(
    *, identity: Identity, instance_id: str, proposal_id: str, idempotency_key: str, command: object, request_id=""
) -> Receipt:
    """Close a pending proposal unrun (its proposer may withdraw it so); the answer is the closed proposal."""
    reason, fingerprint = _decision(REJECT, identity, instance_id, proposal_id, idempotency_key, command)

    def commit() -> Receipt:
        locks = LockSet()
        row, replay = key_held(
            locks=locks,
            identity=identity,
            key=idempotency_key,
            fingerprint=fingerprint,
            operation=REJECT,
            instance_id=instance_id,
        )
        if replay is not None:
            return replay
        # proposal_held found the instance readable; its namespace and definition never change.
        proposal = proposal_held(locks=locks, identity=identity, instance_id=instance_id, proposal_id=proposal_id)
        instance = locks.lock_one(Level.INSTANCE, instance_id)
        with acting_for(identity):
            proposal_close(
                proposal=proposal,
                instance=instance,
                state=ProposalState.REJECTED,
                actor_id=identity.actor_id,
                reason=reason,
                request_id=request_id,
            )
        return receipt_freeze(row=row, data=proposal_snapshot(proposal))

    return key_retried(commit)
