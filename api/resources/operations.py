"""The audits and recovery: signal and workflow audit records, the recovery commands, their receipt and the
proposals an approval policy holds. The receipt and the proposal are written by ``recovery`` and answered verbatim.
"""

from collections.abc import Mapping
from dataclasses import fields
from functools import cache

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api.resources import optional, paged
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    UNAVAILABLE_ERRORS,
    WORKFLOW_NOT_FOUND,
    Command,
    ExactJSONField,
    IdField,
    NotNullJSONField,
    RevisionField,
    StepKeyField,
    TimeField,
    evidence_ref,
    only,
    reason,
    schema_field,
    u32,
)
from core.times import format_time
from history.models import SignalOperation, WorkflowOperation
from history.selectors import operations as operation_reads
from history.selectors.pagination import Page
from recovery.commands import NOT_NULL


@extend_schema_field({"type": "object", "nullable": True, "additionalProperties": True})
class SnapshotField(serializers.JSONField):
    pass


class SignalOperationItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    signal_id = IdField()
    operation_id = IdField()
    actor_id = IdField()
    action = serializers.CharField()
    created_at = TimeField()


def signal_operation_item(record: SignalOperation) -> dict:
    return {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "signal_id": record.signal_id,
        "operation_id": record.operation_id,
        "actor_id": record.actor_id,
        "action": record.action,
        "created_at": format_time(record.created_at),
    }


class SignalOperationPage(serializers.Serializer):
    items = SignalOperationItem(many=True)
    next_cursor = serializers.CharField(required=False)


def signal_operation_page(page: Page[SignalOperation], *, next_cursor: str | None) -> dict:
    # Items and cursor only, no parent fields: each item names its workflow and signal itself.
    return paged({}, items=[signal_operation_item(r) for r in page.items], next_cursor=next_cursor)


def _reason_and_snapshots(data: dict, record) -> dict:
    data["reason"] = record.reason
    optional(data, "evidence_ref", record.evidence_ref)
    data["before"] = record.before
    data["after"] = record.after
    return data


class SignalOperationDetail(SignalOperationItem):
    reason = serializers.CharField()
    evidence_ref = serializers.CharField(required=False)
    before = SnapshotField(help_text="null for an acceptance")
    after = schema_field(
        {"type": "object", "additionalProperties": True},
        serializers.JSONField,
        help_text="the acceptance snapshot, never rewritten (never null)",
    )


def signal_operation_detail(record: SignalOperation) -> dict:
    return _reason_and_snapshots(signal_operation_item(record), record)


class WorkflowOperationItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    operation_id = IdField()
    actor_id = IdField()
    action = serializers.CharField()
    step_key = serializers.CharField(required=False)
    activation_id = IdField(required=False)
    execution_audit_id = IdField(required=False)
    reason = serializers.CharField()
    evidence_ref = serializers.CharField(required=False)
    before = SnapshotField()
    after = SnapshotField()
    created_at = TimeField()


def workflow_operation_item(record: WorkflowOperation) -> dict:
    data = {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "operation_id": record.operation_id,
        "actor_id": record.actor_id,
        "action": record.action,
    }
    optional(data, "step_key", record.step_key)
    optional(data, "activation_id", record.activation_id)
    optional(data, "execution_audit_id", record.execution_audit_id)
    _reason_and_snapshots(data, record)
    data["created_at"] = format_time(record.created_at)
    return data


class WorkflowOperationPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = WorkflowOperationItem(many=True)
    next_cursor = serializers.CharField(required=False)


def workflow_operation_page(result: operation_reads.WorkflowOperationPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return paged(data, items=[workflow_operation_item(r) for r in result.page.items], next_cursor=next_cursor)


# ---- recovery ------------------------------------------------------------------------------------


@extend_schema_field({"type": "string", "enum": ["SUCCEEDED", "FAILED"]}, component_name="Conclusion")
class ConclusionField(serializers.CharField):
    pass


@extend_schema_field({"type": "boolean", "enum": [True]}, component_name="Declaration")
class DeclarationField(serializers.BooleanField):
    pass


def _declaration(asserts: str) -> DeclarationField:
    return DeclarationField(help_text=f"must be true: the operator asserts {asserts}")


# The OpenAPI field of each command field (recovery.commands checks them); every field is required.
# A declaration field is documented by what its operation's operator asserts (``_command``).
_COMMAND_FIELDS = {
    "expected_revision": lambda: RevisionField(help_text="the instance's current revision (not control)"),
    "reason": reason,
    "evidence_ref": evidence_ref,
    "task_id": lambda: IdField(help_text="a task of this instance"),
    "expected_task_revision": lambda: RevisionField(help_text="the task's current revision"),
    "step_key": StepKeyField,
    "activation_id": lambda: IdField(help_text="the step's current activation"),
    "expected_step_revision": lambda: RevisionField(help_text="the step's current revision"),
    "conclusion": ConclusionField,
    "result": lambda: ExactJSONField(
        help_text="any JSON, stored byte-exact; a SUCCEEDED ResolveStep satisfies the step's result contract "
        "(TIMER: null)"
    ),
}


def _variant_field(value: str) -> serializers.Field:
    """A field as one variant of a command documents it: never null, or one fixed value."""
    if value == NOT_NULL:
        return NotNullJSONField(help_text="never null")
    return only(value)


def _command(name: str, command_class: type, variant: Mapping[str, str]) -> type[serializers.Serializer]:
    declaration = command_class.declaration

    def made(field: str) -> serializers.Field:
        if field in variant:
            return _variant_field(variant[field])
        if field == declaration.field:
            return _declaration(declaration.asserts)
        return _COMMAND_FIELDS[field]()

    return type(name, (Command,), {field.name: made(field.name) for field in fields(command_class)})


@cache
def command_described(operation) -> type[serializers.Serializer] | PolymorphicProxySerializer:
    """The OpenAPI command of an entry of OPERATIONS, made when first asked, then the same one (one component)."""
    name = operation.command_class.__name__
    variants = operation.command_class.variants or {"": {}}
    if len(variants) == 1:
        return _command(name, operation.command_class, variants[""])
    return PolymorphicProxySerializer(
        component_name=name,
        serializers=[
            _command(f"{name}{suffix}", operation.command_class, overrides) for suffix, overrides in variants.items()
        ],
        resource_type_field_name=None,
    )


class RecoveryReceipt(serializers.Serializer):
    """The receipt's data; the optional members say what the operation touched."""

    operation_id = IdField(help_text="the operation_id of the workflow audit")
    execution_operation_id = IdField(required=False, help_text="ReviewTask: the execution audit's")
    operation = serializers.CharField(help_text="the audit action, e.g. workflow.retry_step")
    workflow_id = IdField()
    revision = RevisionField()
    control_revision = RevisionField()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    step_key = serializers.CharField(required=False, help_text="every operation but Continue")
    activation_id = IdField(required=False, help_text="every operation but Continue")
    activation_sequence = u32(min_value=1, required=False, help_text="every operation but Continue")
    task_id = IdField(required=False, help_text="ReviewTask: the reviewed task; RetryStep: the new task")
    proposal_id = IdField(required=False, help_text="an approved proposal's: the operation ran from it")


class ProposalAnswer(serializers.Serializer):
    """A recovery command held for a second person (an approval policy applies), or the decision on one."""

    proposal_id = IdField()
    workflow_id = IdField()
    operation = serializers.CharField(help_text="the operation's API name, e.g. retry-step")
    state = serializers.ChoiceField(choices=["PENDING", "APPROVED", "REJECTED", "EXPIRED"])
    expected_revision = RevisionField(help_text="the instance revision the command was checked at")
    proposed_by = IdField(help_text="the proposer's actor id; only another actor may approve")
    reason = serializers.CharField()
    evidence_ref = serializers.CharField()
    created_at = TimeField()
    expires_at = TimeField(help_text="unapproved by then, the runner expires it")
    decided_by = serializers.CharField(
        allow_blank=True, help_text='empty while PENDING; the deciding actor id, or "engine" for an expiry'
    )
    decided_at = TimeField(required=False, help_text="absent while PENDING")


class ApproveCommand(Command):
    reason = reason(required=False, help_text="an optional note of the approver's (the proposal has the reason)")


class RejectCommand(Command):
    reason = reason(help_text="why the proposal is not run")


RECOVERY_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, Idempotency-Key or command, {BODY_LIMITS} (field named); "
    "FAILED_PRECONDITION: the instance is not NEEDS_REVIEW, its inbox holds a PENDING or QUARANTINED record, or a "
    "rule of the operation",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or the referenced step, task or activation is not under this instance",
    409: "ABORTED: a revision is stale or activation_id is not the step's current one; ALREADY_EXISTS: this "
    "Idempotency-Key was used for another command",
    429: "RESOURCE_EXHAUSTED: the application or queue quota has no room for the new task",
    **UNAVAILABLE_ERRORS,
}


DECISION_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id, Idempotency-Key or body (field named); FAILED_PRECONDITION: the "
    "proposal is no longer PENDING or has expired; approve: the instance is not NEEDS_REVIEW, its inbox is not "
    "clean, or a rule of the operation",
    **AUTH_ERRORS,
    403: "PERMISSION_DENIED: the credential lacks workflows:recover; approve: the caller proposed it",
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or no such proposal of this workflow",
    409: "ABORTED: approve: the instance or a row the command names moved since it was proposed (nothing is "
    "written: propose again); ALREADY_EXISTS: this Idempotency-Key was used for another command",
    **UNAVAILABLE_ERRORS,
}


APPROVAL_ERRORS = DECISION_ERRORS | {
    429: "RESOURCE_EXHAUSTED: the application or queue quota has no room for the operation's new task"
}
