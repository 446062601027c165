"""Acknowledge, assign and note: what operators say about an instance, kept apart from what the engine does.

None of these writes an engine row: the instance's state, revision and control_revision, and every
step's, activation's and task's, stay as they are. Each write is a workflow audit row, whose
``audit.created`` timeline event is numbered under the instance's row lock, so the lock is taken
first, as every timeline writer does. Notes are append-only: a mistake is corrected by a new note
naming the one it corrects. An acknowledgement and an assignment belong to one review (the
instance's ``review_since``): when the instance comes back into review, that review starts
unacknowledged and unassigned.
"""

from collections.abc import Callable
from typing import Any

from core import clock, fields, limits
from core.errors import FailedPrecondition, NotFound
from core.identity import Identity
from history import idempotency
from history.audits import attention_snapshot, audit_write, note_snapshot
from history.events import acting_for
from history.idempotency import Receipt
from history.locking import Level, LockSet, atomic_with_retry
from history.models import InstanceState, Note, Operator, ReviewAttention, Scope, WorkflowInstance, WorkflowOperation
from history.selectors.access import instance_get_readable

# Either scope is enough: an annotator need not be able to recover, a recoverer may always annotate.
ANNOTATING = (Scope.ANNOTATE, Scope.RECOVER)
NOTE_FIELDS = ("text", "evidence_ref", "corrects")
ASSIGN_FIELDS = ("assignee",)


def note_add(
    *, identity: Identity, instance_id: str, command: Any, idempotency_key: Any, request_id: str = ""
) -> Receipt:
    """Append a note to a visible instance, in any state: ``{text, evidence_ref?, corrects?}``.

    ``corrects`` names an earlier note of the same instance (NOT_FOUND otherwise); the note it
    corrects stays as written. Idempotent per Idempotency-Key (201, a replay answers the same
    text); audited as ``workflow.note`` with the note as its after.
    """
    identity.require_scope(*ANNOTATING)
    key = idempotency.key_check(idempotency_key)
    command = fields.command_object(command, allowed=NOTE_FIELDS)
    text = fields.text("text", fields.required(command, "text"), max_length=limits.MAX_NOTE_TEXT)
    evidence_ref = fields.token("evidence_ref", command["evidence_ref"]) if "evidence_ref" in command else ""
    corrects = fields.identifier("corrects", command["corrects"]) if "corrects" in command else None
    instance = instance_get_readable(identity=identity, instance_id=instance_id)

    def work(locks: LockSet) -> dict:
        locks.lock_one(Level.INSTANCE, instance.id)
        notes = Note.objects.filter(namespace_id=instance.namespace_id, workflow_id=instance.id)
        if corrects is not None and not notes.filter(pk=corrects).exists():
            raise NotFound("corrects must name an earlier note of this workflow", field="corrects")
        now = clock.now()
        note = Note.objects.create(
            namespace_id=instance.namespace_id,
            workflow_id=instance.id,
            text=text,
            evidence_ref=evidence_ref,
            author=identity.actor_id,
            corrects_id=corrects,
            request_id=request_id,
            created_at=now,
        )
        snapshot = note_snapshot(note)
        _audit(identity, instance, "workflow.note", None, snapshot, now=now, request_id=request_id)
        return snapshot

    with acting_for(identity):
        return idempotency.receipt_run(
            namespace_id=identity.namespace_id,
            key=key,
            operation="workflow.note",
            target=instance.id,
            command=command,
            work=work,
            status=201,
        )


def review_acknowledge(*, identity: Identity, instance_id: str, request_id: str = "") -> dict:
    """Record who has seen the instance's current review, and when; audited as ``workflow.acknowledge``.

    Only an instance in NEEDS_REVIEW. A review already acknowledged stays as it is (by whoever
    was first): the answer is the same attention, and no second audit is written.
    """
    identity.require_scope(*ANNOTATING)

    def change(attention: ReviewAttention, now) -> bool:
        if attention.acknowledged_by:
            return False
        attention.acknowledged_by, attention.acknowledged_at = identity.actor_id, now
        return True

    return _attend(identity, instance_id, "workflow.acknowledge", change, request_id=request_id)


def review_assign(*, identity: Identity, instance_id: str, assignee: Any, request_id: str = "") -> dict:
    """Name the operator on the instance's current review (``""`` unassigns); audited as ``workflow.assign``.

    ``assignee`` is an actor id (32 lowercase hex; INVALID_ARGUMENT naming it otherwise) of an
    operator of the caller's namespace (NOT_FOUND naming it otherwise, once the instance is found
    in review: who is an operator is a row, not syntax). Only an instance in NEEDS_REVIEW; the
    same assignee again changes nothing and writes no audit.
    """
    identity.require_scope(*ANNOTATING)
    if assignee != "":
        assignee = fields.identifier("assignee", assignee)

    def change(attention: ReviewAttention, now) -> bool:
        if assignee and not Operator.objects.filter(namespace_id=identity.namespace_id, actor_id=assignee).exists():
            raise NotFound("assignee must be the actor id of an operator of this namespace", field="assignee")
        if attention.assignee == assignee:
            return False
        attention.assignee = assignee
        attention.assigned_by, attention.assigned_at = (identity.actor_id, now) if assignee else ("", None)
        return True

    return _attend(identity, instance_id, "workflow.assign", change, request_id=request_id)


def _attend(
    identity: Identity, instance_id: str, action: str, change: Callable[[ReviewAttention, Any], bool], *, request_id
) -> dict:
    """Apply ``change`` to the attention of the instance's current review under its lock; audit it if it changed."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)

    def work() -> dict:
        locked = LockSet().lock_one(Level.INSTANCE, instance.id)
        if locked.state != InstanceState.NEEDS_REVIEW or locked.review_since is None:
            raise FailedPrecondition(f"the instance is {locked.state}, not in review")
        attention = ReviewAttention.objects.filter(pk=locked.id).first()
        if attention is None or attention.review_since != locked.review_since:
            # Nothing yet, or a row of an earlier review: this review starts unacknowledged and unassigned.
            attention = ReviewAttention(instance_id=locked.id, review_since=locked.review_since)
        before = attention_snapshot(attention)
        now = clock.now()
        if not change(attention, now):
            return before
        attention.save()
        after = attention_snapshot(attention)
        _audit(identity, locked, action, before, after, now=now, request_id=request_id)
        return after

    with acting_for(identity):
        return atomic_with_retry(work)


def _audit(
    identity: Identity, instance: WorkflowInstance, action: str, before, after, *, now, request_id: str
) -> WorkflowOperation:
    # No reason is asked: a note is its own reason, an acknowledgement or assignment needs none.
    return audit_write(
        model=WorkflowOperation,
        namespace_id=instance.namespace_id,
        actor_id=identity.actor_id,
        action=action,
        reason="",
        evidence_ref=after.get("evidence_ref", "") if action == "workflow.note" else "",
        request_id=request_id,
        before=before,
        after=after,
        now=now,
        workflow=instance,
    )
