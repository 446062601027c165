"""Signals: the command that accepts one and its answer (written by the engine), and the signal reads."""

from rest_framework import serializers

from api.resources import optional, paged
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
    reason,
    text_field,
    u32,
)
from core.exactjson import Raw
from core.times import format_time
from history.models import Signal
from history.selectors import signals as signal_reads


class SignalCommand(Command):
    name = text_field(max_length=128)
    payload_version = text_field(max_length=64)
    payload = ExactJSONField(help_text="any JSON, stored byte-exact")
    correlation_key = text_field(max_length=256, blank=True)
    target_step_key = StepKeyField(
        required=False,
        help_text="a SIGNAL step (or POLL step with a final signal) of the definition; required unless exactly "
        "one such step awaits this name",
    )
    target_activation_sequence = u32(min_value=1, required=False)
    reason = reason()
    evidence_ref = evidence_ref(required=False)


class SignalAccepted(serializers.Serializer):
    workflow_id = IdField()
    signal_id = IdField()
    operation_id = IdField(help_text="the operation_id of the workflow.signal audit")
    state = serializers.CharField()
    revision = RevisionField(help_text="the instance revision after the acceptance")
    accepted_at = TimeField()
    expires_at = TimeField()


class SignalItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    revision = RevisionField()
    name = serializers.CharField()
    payload_version = serializers.CharField(allow_blank=True, help_text='"" on legacy rows')
    target_step_key = serializers.CharField()
    target_activation_sequence = u32(help_text="0 on legacy rows")
    state = serializers.CharField()
    accepted_at = TimeField()
    expires_at = TimeField()
    disposition = serializers.CharField(required=False)


def signal_item(signal: Signal) -> dict:
    data = {
        "id": signal.id,
        "workflow_id": signal.workflow_id,
        "revision": str(signal.revision),
        "name": signal.name,
        "payload_version": signal.payload_version,
        "target_step_key": signal.target_step_key,
        "target_activation_sequence": signal.target_activation_sequence,
        "state": signal.state,
        "accepted_at": format_time(signal.accepted_at),
        "expires_at": format_time(signal.expires_at),
    }
    optional(data, "disposition", signal.disposition)
    return data


class SignalPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = SignalItem(many=True)
    next_cursor = serializers.CharField(required=False)


def signal_page(result: signal_reads.SignalPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return paged(data, items=[signal_item(s) for s in result.page.items], next_cursor=next_cursor)


class SignalDetail(SignalItem):
    payload = ExactJSONField()
    correlation_key = serializers.CharField(allow_blank=True)
    actor_id = IdField()
    evidence_ref = serializers.CharField(required=False)
    consumed_wait_id = IdField(required=False)


def signal_detail(signal: Signal) -> dict:
    data = signal_item(signal)
    data["payload"] = Raw(signal.payload)
    data["correlation_key"] = signal.correlation_key
    data["actor_id"] = signal.actor_id
    optional(data, "evidence_ref", signal.evidence_ref)
    optional(data, "consumed_wait_id", signal.consumed_wait_id)
    return data


SIGNAL_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id, command or Idempotency-Key, or a target that is not a signal step of "
    f"the definition, {BODY_LIMITS} (field named); FAILED_PRECONDITION: the instance is finished",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    409: KEY_REUSED,
    **UNAVAILABLE_ERRORS,
}
