"""Notes, acknowledgement and assignment: what operators say about an instance. A note and the attention are
written by ``history.audits`` (the receipt of a write, and the items of the note page)."""

from rest_framework import serializers

from api.resources import paged
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    KEY_REUSED,
    UNAVAILABLE_ERRORS,
    WORKFLOW_NOT_FOUND,
    Command,
    IdField,
    RevisionField,
    TimeField,
    evidence_ref,
    schema_field,
    text_field,
)
from core import limits
from core.ids import ID_PATTERN
from history.audits import attention_snapshot, note_snapshot
from history.selectors import annotations as note_reads


class NoteCommand(Command):
    text = text_field(max_length=limits.MAX_NOTE_TEXT, help_text="what the operator found or did")
    evidence_ref = evidence_ref(required=False)
    corrects = IdField(required=False, help_text="an earlier note of this workflow that this one corrects")


class AcknowledgeCommand(Command):
    """No fields: the caller acknowledges the current review."""


class AssignCommand(Command):
    assignee = schema_field(
        {
            "type": "string",
            "maxLength": 32,
            "pattern": f"^(?:{ID_PATTERN.pattern})?$",
            "description": 'the actor id of an operator of the namespace (32 lowercase hex); "" unassigns',
        }
    )


class NoteItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    text = serializers.CharField(help_text="as written; notes are never edited")
    evidence_ref = serializers.CharField(required=False)
    corrects = IdField(required=False, help_text="the earlier note of this workflow that this one corrects")
    author = IdField(help_text="the actor id of who wrote it")
    created_at = TimeField()


class Attention(serializers.Serializer):
    workflow_id = IdField()
    review_since = TimeField(help_text="the review this belongs to: a later review starts without it")
    acknowledged_by = IdField(required=False, help_text="the actor id of who acknowledged the review first")
    acknowledged_at = TimeField(required=False)
    assignee = IdField(required=False, help_text="the actor id of the operator on the review")
    assigned_by = IdField(required=False)
    assigned_at = TimeField(required=False)


class NotePage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField(help_text="the instance revision when this page was read; notes never change it")
    attention = Attention(required=False, help_text="the current review's acknowledgement and assignment, if any")
    items = NoteItem(many=True)
    next_cursor = serializers.CharField(required=False)


def note_page(result: note_reads.NotePage, *, next_cursor: str | None) -> dict:
    """The notes, newest first, after the current review's acknowledgement and assignment (absent when none)."""
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    if result.attention is not None:
        data["attention"] = attention_snapshot(result.attention)
    return paged(data, items=[note_snapshot(note) for note in result.page.items], next_cursor=next_cursor)


NOTE_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, command or Idempotency-Key, {BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or corrects names no note of this workflow (field corrects)",
    409: KEY_REUSED,
    **UNAVAILABLE_ERRORS,
}


ATTENTION_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the instance is not in review",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    **UNAVAILABLE_ERRORS,
}


ASSIGN_ERRORS = ATTENTION_ERRORS | {
    404: f"{WORKFLOW_NOT_FOUND}; or assignee is the actor id of no operator of the namespace (field assignee)"
}
