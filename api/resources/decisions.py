"""Decisions (``recovery.decisions``): one call states what the operator established; the answer is the decision,
a resource to follow while its chain of recovery operations runs."""

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api.resources.operations import ConclusionField, DeclarationField
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    KEY_REUSED,
    UNAVAILABLE_ERRORS,
    WORKFLOW_NOT_FOUND,
    Command,
    ExactJSONField,
    IdField,
    RevisionField,
    StepKeyField,
    TimeField,
    evidence_ref,
    only,
    reason,
)
from core import exactjson
from core.times import format_time
from history.models import Decision, DecisionState
from recovery.decisions import KINDS, Kind
from recovery.operations import OPERATIONS


@extend_schema_field({"type": "string", "enum": list(KINDS)}, component_name="DecisionKind")
class KindField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": list(DecisionState.values)}, component_name="DecisionState")
class StateField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": list(OPERATIONS)}, component_name="OperationName")
class OperationNameField(serializers.CharField):
    pass


def decision_fields(kind: Kind, *, revision: bool = True) -> dict[str, serializers.Field]:
    """The fields of one kind of decision: the common ones (``expected_revision`` when ``revision``: a campaign's
    items carry their own), and its outcome fields (required) when it has any."""
    fields = {
        "kind": only(kind.name, help_text=kind.established),
        "step_key": StepKeyField(help_text="the step the decision is about"),
    }
    if revision:
        fields["expected_revision"] = RevisionField(help_text="the instance's revision the operator decided on")
    fields |= {
        "reason": reason(),
        "evidence_ref": evidence_ref(),
        "declared": DeclarationField(
            help_text="must be true: the operator makes the declaration of every operation the decision runs"
        ),
    }
    if "conclusion" in kind.outcome:
        fields["conclusion"] = ConclusionField()
    if "result" in kind.outcome:
        fields["result"] = ExactJSONField(
            help_text="the work's result, stored byte-exact"
            if "conclusion" in kind.outcome
            else "the pending answer, as the poll's mapping reads it"
        )
    return fields


def kind_title(kind: Kind) -> str:
    return "".join(part.title() for part in kind.name.split("-"))


def _command(kind: Kind) -> type[serializers.Serializer]:
    """The body of one kind of decision."""
    return type(f"Decision{kind_title(kind)}Command", (Command,), decision_fields(kind))


DecisionCommand = PolymorphicProxySerializer(
    component_name="DecisionCommand",
    serializers=[_command(kind) for kind in KINDS.values()],
    resource_type_field_name=None,
)


class DecisionStep(serializers.Serializer):
    operation = OperationNameField()
    at = TimeField()
    operation_id = IdField(required=False, help_text="its workflow audit row (absent when held as a proposal)")
    revision = RevisionField(required=False, help_text="the instance's revision after it")
    state = serializers.CharField(required=False, help_text="the instance's state after it")
    proposal_id = IdField(required=False, help_text="the proposal it was held as")


class DecisionRefusal(serializers.Serializer):
    operation = serializers.CharField(help_text='the operation refused ("" when none was possible)')
    code = serializers.CharField(help_text="the error code, or HELD")
    message = serializers.CharField()


class DecisionApproval(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["APPROVED", "REJECTED"])
    by = IdField(help_text="the second person (or, for a withdrawal, the maker)")
    at = TimeField()
    note = serializers.CharField(help_text="the approver's note (optional), or why it was rejected")


class DecisionAnswer(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    kind = KindField()
    step_key = StepKeyField()
    state = StateField(
        help_text="RUNNING (steps to run, now or after the background), SUCCEEDED (out of review), "
        "REFUSED or HELD (see refusal); under four eyes PROPOSED (nothing ran: waits for a second person until "
        "expires_at), then RUNNING once approved, or REJECTED or EXPIRED (nothing ran)"
    )
    steps = DecisionStep(many=True, help_text="the operations run, in order")
    waiting = serializers.CharField(required=False, help_text="while RUNNING: what the next step waits for")
    refusal = DecisionRefusal(required=False)
    expires_at = TimeField(required=False, help_text="held for approval: until when a second person may approve")
    approval = DecisionApproval(required=False, help_text="held for approval: the second person's answer")
    reason = serializers.CharField()
    evidence_ref = serializers.CharField()
    actor_id = IdField()
    created_at = TimeField()
    updated_at = TimeField()


def decision(row: Decision) -> dict:
    command = exactjson.loads(row.command)
    data = {
        "id": row.id,
        "workflow_id": row.workflow_id,
        "kind": row.kind,
        "step_key": command["step_key"],
        "state": row.state,
        "steps": row.steps,
    }
    if row.waiting:
        data["waiting"] = row.waiting
    if row.refusal:
        data["refusal"] = row.refusal
    if row.expires_at:
        data["expires_at"] = format_time(row.expires_at)
    if row.approval:
        data["approval"] = row.approval
    return data | {
        "reason": row.reason,
        "evidence_ref": row.evidence_ref,
        "actor_id": row.actor_id,
        "created_at": format_time(row.created_at),
        "updated_at": format_time(row.updated_at),
    }


DECISION_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, command or Idempotency-Key, {BODY_LIMITS} (field named); "
    "FAILED_PRECONDITION: the instance is not in review, or its inbox holds unconsumed records",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or the instance has no such step (field step_key)",
    409: f"ABORTED: the instance moved since the revision decided on (the message names the last operation); "
    f"{KEY_REUSED}",
    **UNAVAILABLE_ERRORS,
}


ANSWER_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, Idempotency-Key or body, {BODY_LIMITS} (field named); "
    "FAILED_PRECONDITION: the decision is not PROPOSED (the message says who answered it and when) or has expired",
    **AUTH_ERRORS,
    403: "PERMISSION_DENIED: the credential lacks workflows:recover; approve: the caller made the decision",
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or no such decision of this workflow (field decision_id)",
    409: f"ABORTED: approve: the instance moved since the decision was made (nothing ran: decide again); {KEY_REUSED}",
    **UNAVAILABLE_ERRORS,
}
