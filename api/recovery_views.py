"""POST /v1/workflows/{id}/recovery/{operation}: the six operations over HTTP, and the decisions on the
proposals an approval policy makes of them (POST …/proposals/{proposal_id}/approve|reject).

The view only reads the Idempotency-Key header and the JSON body and calls the operation's
service; the receipt's stored text is answered verbatim, so a replay's ``data`` is
byte-identical to the first answer (with a new request_id) and says ``Idempotent-Replayed``.
A command an approval policy holds back answers 202 with the proposal instead of the receipt.
``RecoverySchema`` describes each route as its own OpenAPI operation: its command and its errors.
"""

from collections.abc import Mapping
from dataclasses import fields
from functools import partial

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.views import APIView

from api import openapi, schema
from api.permissions import scope_required
from api.rendering import receipt_response
from core.ids import ID_PATTERN
from core.request_id import request_id_of
from history import idempotency
from history.models import Scope
from recovery.commands import NOT_NULL
from recovery.operations import OPERATIONS
from recovery.proposals import proposal_approve, proposal_reject

IDEMPOTENCY_HEADER = idempotency.HEADER


@extend_schema_field({"type": "boolean", "enum": [True]}, component_name="Declaration")
class DeclarationField(serializers.BooleanField):
    pass


def _declaration(asserts: str) -> DeclarationField:
    return DeclarationField(help_text=f"must be true: the operator asserts {asserts}")


# The OpenAPI field of each command field (recovery.commands checks them); every field is required.
# A declaration field is documented by what its operation's operator asserts.
_COMMAND_FIELDS = {
    **{op.declaration: partial(_declaration, op.command_class.declaration.asserts) for op in OPERATIONS.values()},
    "expected_revision": lambda: schema.RevisionField(help_text="the instance's current revision (not control)"),
    "reason": openapi.reason,
    "evidence_ref": openapi.evidence_ref,
    "task_id": lambda: schema.IdField(help_text="a task of this instance"),
    "expected_task_revision": lambda: schema.RevisionField(help_text="the task's current revision"),
    "step_key": schema.StepKeyField,
    "activation_id": lambda: schema.IdField(help_text="the step's current activation"),
    "expected_step_revision": lambda: schema.RevisionField(help_text="the step's current revision"),
    "conclusion": openapi.ConclusionField,
    "result": lambda: schema.ExactJSONField(
        help_text="any JSON, stored byte-exact; a SUCCEEDED ResolveStep satisfies the step's result contract "
        "(TIMER: null)"
    ),
}


def _variant_field(value: str) -> serializers.Field:
    """A field as one variant of a command documents it: never null, or one fixed value."""
    if value == NOT_NULL:
        return schema.NotNullJSONField(help_text="never null")
    return openapi.only(value)


def _command(name: str, command_class: type, variant: Mapping[str, str]) -> type[serializers.Serializer]:
    def made(field: str) -> serializers.Field:
        return _variant_field(variant[field]) if field in variant else _COMMAND_FIELDS[field]()

    return type(name, (openapi.Command,), {field.name: made(field.name) for field in fields(command_class)})


def _described(operation) -> type[serializers.Serializer] | PolymorphicProxySerializer:
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


COMMANDS = {name: _described(operation) for name, operation in OPERATIONS.items()}


class RecoveryReceipt(serializers.Serializer):
    """The receipt's data; the optional members say what the operation touched."""

    operation_id = schema.IdField(help_text="the operation_id of the workflow audit")
    execution_operation_id = schema.IdField(required=False, help_text="ReviewTask: the execution audit's")
    operation = serializers.CharField(help_text="the audit action, e.g. workflow.retry_step")
    workflow_id = schema.IdField()
    revision = schema.RevisionField()
    control_revision = schema.RevisionField()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    step_key = serializers.CharField(required=False, help_text="every operation but Continue")
    activation_id = schema.IdField(required=False, help_text="every operation but Continue")
    activation_sequence = schema.u32(min_value=1, required=False, help_text="every operation but Continue")
    task_id = schema.IdField(required=False, help_text="ReviewTask: the reviewed task; RetryStep: the new task")
    proposal_id = schema.IdField(required=False, help_text="an approved proposal's: the operation ran from it")


class ProposalAnswer(serializers.Serializer):
    """A recovery command held for a second person (an approval policy applies), or the decision on one."""

    proposal_id = schema.IdField()
    workflow_id = schema.IdField()
    operation = serializers.CharField(help_text="the operation's API name, e.g. retry-step")
    state = serializers.ChoiceField(choices=["PENDING", "APPROVED", "REJECTED", "EXPIRED"])
    expected_revision = schema.RevisionField(help_text="the instance revision the command was checked at")
    proposed_by = schema.IdField(help_text="the proposer's actor id; only another actor may approve")
    reason = serializers.CharField()
    evidence_ref = serializers.CharField()
    created_at = schema.TimeField()
    expires_at = schema.TimeField(help_text="unapproved by then, the runner expires it")
    decided_by = serializers.CharField(
        allow_blank=True, help_text='empty while PENDING; the deciding actor id, or "engine" for an expiry'
    )
    decided_at = schema.TimeField(required=False, help_text="absent while PENDING")


_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, Idempotency-Key or command, {schema.BODY_LIMITS} (field named); "
    "FAILED_PRECONDITION: the instance is not NEEDS_REVIEW, its inbox holds a PENDING or QUARANTINED record, or a "
    "rule of the operation",
    **openapi.AUTH_ERRORS,
    **openapi.BODY_REFUSALS,
    404: f"{openapi.WORKFLOW_NOT_FOUND}; or the referenced step, task or activation is not under this instance",
    409: "ABORTED: a revision is stale or activation_id is not the step's current one; ALREADY_EXISTS: this "
    "Idempotency-Key was used for another command",
    429: "RESOURCE_EXHAUSTED: the application or queue quota has no room for the new task",
    **openapi.UNAVAILABLE,
}
INSTANCE_ID = schema.path_parameter("instance_id", "workflow instance id", ID_PATTERN)


class RecoverySchema(AutoSchema):
    """Each route's own operation: its command, the receipt and the errors it can answer."""

    def get_operation_id(self) -> str:
        return f"recovery_{self.view.operation.replace('-', '_')}"

    def get_summary(self) -> str:
        return f"{OPERATIONS[self.view.operation].command_class.__name__.removesuffix('Command')} (workflows:recover)"

    def get_override_parameters(self) -> list:
        return [INSTANCE_ID, *schema.idempotency_key(status=200)]

    def get_request_serializer(self) -> type[serializers.Serializer] | PolymorphicProxySerializer:
        return COMMANDS[self.view.operation]

    def get_response_serializers(self) -> dict:
        errors = {
            code: text for code, text in _ERRORS.items() if code != 429 or OPERATIONS[self.view.operation].takes_quota
        }
        return schema.responses(RecoveryReceipt, errors=errors) | {
            202: OpenApiResponse(
                schema.envelope(ProposalAnswer),
                description="an approval policy applies: the command passed every check and waits as a proposal "
                "for another person's approval (POST …/proposals/{proposal_id}/approve)",
            )
        }


class RecoveryView(APIView):
    """One recovery operation; ``operation`` is its API name, e.g. ``retry-step``."""

    permission_classes = [scope_required(Scope.RECOVER)]
    operation = ""
    schema = RecoverySchema()

    def post(self, request, instance_id: str):
        key = idempotency.key_check(request.headers.get(IDEMPOTENCY_HEADER))
        receipt = OPERATIONS[self.operation].service(
            identity=request.auth,
            instance_id=instance_id,
            idempotency_key=key,
            command=request.data,
            request_id=request_id_of(request),
        )
        return receipt_response(receipt)


class ApproveCommand(openapi.Command):
    reason = openapi.reason(
        required=False, help_text="an optional note of the approver's (the proposal has the reason)"
    )


class RejectCommand(openapi.Command):
    reason = openapi.reason(help_text="why the proposal is not run")


_DECISION_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id, Idempotency-Key or body (field named); FAILED_PRECONDITION: the "
    "proposal is no longer PENDING or has expired; approve: the instance is not NEEDS_REVIEW, its inbox is not "
    "clean, or a rule of the operation",
    **openapi.AUTH_ERRORS,
    403: "PERMISSION_DENIED: the credential lacks workflows:recover; approve: the caller proposed it",
    **openapi.BODY_REFUSALS,
    404: f"{openapi.WORKFLOW_NOT_FOUND}; or no such proposal of this workflow",
    409: "ABORTED: approve: the instance or a row the command names moved since it was proposed (nothing is "
    "written: propose again); ALREADY_EXISTS: this Idempotency-Key was used for another command",
    **openapi.UNAVAILABLE,
}
_APPROVAL_ERRORS = _DECISION_ERRORS | {
    429: "RESOURCE_EXHAUSTED: the application or queue quota has no room for the operation's new task"
}


def _decision_view(service, command, answer: type[serializers.Serializer], summary: str, errors: dict):
    class DecisionView(APIView):
        __doc__ = f"POST /v1/workflows/{{id}}/proposals/{{proposal_id}}/{service.__name__.removeprefix('proposal_')}"
        permission_classes = [scope_required(Scope.RECOVER)]

        @extend_schema(
            operation_id=f"{service.__name__.removeprefix('proposal_')}_recovery_proposal",
            summary=summary,
            parameters=[
                INSTANCE_ID,
                schema.path_parameter("proposal_id", "the proposal's id", ID_PATTERN),
                *schema.idempotency_key(status=200),
            ],
            request=command,
            responses=schema.responses(answer, errors=errors),
        )
        def post(self, request, instance_id: str, proposal_id: str):
            receipt = service(
                identity=request.auth,
                instance_id=instance_id,
                proposal_id=proposal_id,
                idempotency_key=idempotency.key_check(request.headers.get(IDEMPOTENCY_HEADER)),
                command=request.data,
                request_id=request_id_of(request),
            )
            return receipt_response(receipt)

    DecisionView.__name__ = f"{service.__name__}_view"
    return DecisionView


ProposalApproveView = _decision_view(
    proposal_approve,
    ApproveCommand,
    RecoveryReceipt,
    "Approve a recovery proposal: its stored command runs now (workflows:recover; not its proposer)",
    _APPROVAL_ERRORS,
)
ProposalRejectView = _decision_view(
    proposal_reject,
    RejectCommand,
    ProposalAnswer,
    "Reject a recovery proposal: nothing runs (workflows:recover; its proposer may withdraw it)",
    _DECISION_ERRORS,
)
