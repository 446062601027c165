"""OpenAPI description of the engine's POST endpoints: each command, its answer and its errors.

These serializers only document (``api.engine_views`` renders the answers); the contract tests post
real commands and validate every answer against the served schema with no undocumented key.
"""

import functools

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api import schema
from core import limits
from core.ids import ID_PATTERN
from engine.definitions import MAX_SECONDS
from engine.worker import DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS
from history.tenancy import NAME_PATTERN


@extend_schema_field({"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"})
class NameField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": ["SUCCEEDED", "FAILED"]}, component_name="Conclusion")
class ConclusionField(serializers.CharField):
    pass


@functools.cache
def _only(values: tuple, base: type[serializers.Field]) -> type[serializers.Field]:
    # One class per component: the same values in two commands are one component.
    kind = "boolean" if base is serializers.BooleanField else "string"
    field = type("Only" + "Or".join(str(value).title() for value in values), (base,), {})
    return extend_schema_field({"type": kind, "enum": list(values)}, component_name=field.__name__)(field)


def only(*values, base: type[serializers.Field] = serializers.CharField, **kwargs) -> serializers.Field:
    """A field whose only valid values are ``values`` (one variant of a command)."""
    return _only(values, base)(**kwargs)


def reason(**kwargs) -> serializers.CharField:
    return schema.text_field(max_length=limits.MAX_REASON, **kwargs)


def evidence_ref(**kwargs) -> serializers.CharField:
    return schema.token_field(max_length=limits.MAX_EVIDENCE_REF, help_text="never dereferenced", **kwargs)


def lease_seconds() -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1, max_value=MAX_LEASE_SECONDS, required=False, help_text=f"default {DEFAULT_LEASE_SECONDS}"
    )


# ---- commands ------------------------------------------------------------------------------


class Command(serializers.Serializer):
    """A command body: a JSON object whose unknown keys are refused (400 naming the key)."""


class ClosedCommand(OpenApiSerializerExtension):
    target_class = Command
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        return auto_schema._map_serializer(self.target, direction, bypass_extensions=True) | {
            "additionalProperties": False
        }


class StartCommand(Command):
    definition = NameField(help_text="a definition name of the caller's namespace")
    version = schema.u32(min_value=1, required=False, help_text="default: the latest version")
    input = schema.ExactJSONField(help_text="any JSON, stored byte-exact")
    business_key = schema.text_field(max_length=256, blank=True, required=False)
    deadline_seconds = serializers.IntegerField(
        min_value=1,
        max_value=MAX_SECONDS,
        required=False,
        allow_null=True,
        help_text="default: the definition's deadline; null: no deadline",
    )


class SignalCommand(Command):
    name = schema.text_field(max_length=128)
    payload_version = schema.text_field(max_length=64)
    payload = schema.ExactJSONField(help_text="any JSON, stored byte-exact")
    correlation_key = schema.text_field(max_length=256, blank=True)
    target_step_key = schema.StepKeyField(
        required=False,
        help_text="a SIGNAL step (or POLL step with a final signal) of the definition; required unless exactly "
        "one such step awaits this name",
    )
    target_activation_sequence = schema.u32(min_value=1, required=False)
    reason = reason()
    evidence_ref = evidence_ref(required=False)


class ControlCommand(Command):
    expected_control_revision = schema.RevisionField(help_text="the instance's current control_revision")
    reason = reason(required=False)


class NoteCommand(Command):
    text = schema.text_field(max_length=limits.MAX_NOTE_TEXT, help_text="what the operator found or did")
    evidence_ref = evidence_ref(required=False)
    corrects = schema.IdField(required=False, help_text="an earlier note of this workflow that this one corrects")


class AcknowledgeCommand(Command):
    """No fields: the caller acknowledges the current review."""


class AssignCommand(Command):
    assignee = schema.schema_field(
        {
            "type": "string",
            "maxLength": 32,
            "pattern": f"^(?:{ID_PATTERN.pattern})?$",
            "description": 'the actor id of an operator of the namespace (32 lowercase hex); "" unassigns',
        }
    )


class ClaimCommand(Command):
    worker = schema.text_field(max_length=128, help_text="printable characters naming the worker")
    lease_seconds = lease_seconds()


class HeartbeatCommand(Command):
    attempt_id = schema.IdField(help_text="the RUNNING attempt the claim answered")
    lease_seconds = lease_seconds()


class CompleteSucceeded(Command):
    attempt_id = schema.IdField(help_text="the RUNNING attempt the claim answered")
    outcome = only("SUCCEEDED")
    result = schema.ExactJSONField(help_text="any JSON, stored byte-exact")
    retryable = only(False, base=serializers.BooleanField, required=False, help_text="true only with FAILED")


class CompleteFailed(Command):
    attempt_id = schema.IdField(help_text="the RUNNING attempt the claim answered")
    outcome = only("FAILED")
    result = schema.NotNullJSONField(help_text="the failure details")
    retryable = serializers.BooleanField(required=False, help_text="default false")


# A FAILED completion carries its details (never null) and only it may be retryable.
CompleteCommand = PolymorphicProxySerializer(
    component_name="CompleteCommand", serializers=[CompleteSucceeded, CompleteFailed], resource_type_field_name=None
)


# ---- answers -------------------------------------------------------------------------------


class InstanceSummary(serializers.Serializer):
    id = schema.IdField()
    workflow_id = schema.IdField(help_text="the same as id")
    definition = schema.DefinitionRef()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    revision = schema.RevisionField()
    control_revision = schema.RevisionField()
    business_key = serializers.CharField(allow_blank=True)
    created_at = schema.TimeField()
    stop_kind = serializers.CharField(required=False)
    deadline_at = schema.TimeField(required=False)


class SignalAccepted(serializers.Serializer):
    workflow_id = schema.IdField()
    signal_id = schema.IdField()
    operation_id = schema.IdField(help_text="the operation_id of the workflow.signal audit")
    state = serializers.CharField()
    revision = schema.RevisionField(help_text="the instance revision after the acceptance")
    accepted_at = schema.TimeField()
    expires_at = schema.TimeField()


class ClaimedTask(serializers.Serializer):
    id = schema.IdField()
    handler = serializers.CharField()
    priority = serializers.IntegerField()
    input = schema.ExactJSONField()
    business_key = serializers.CharField(allow_blank=True)
    concurrency_key = serializers.CharField(allow_blank=True)
    revision = schema.RevisionField()
    attempt_count = schema.u32()
    max_attempts = schema.u32()
    round = schema.u32(required=False, help_text="POLL query tasks: the business round")
    deadline_at = schema.TimeField(required=False)


class ClaimedAttempt(serializers.Serializer):
    id = schema.IdField()
    number = schema.u32()
    lease_expires_at = schema.TimeField()


class Claim(serializers.Serializer):
    claimed = serializers.BooleanField()
    task = ClaimedTask(required=False, help_text="only when claimed")
    attempt = ClaimedAttempt(required=False, help_text="only when claimed")


class Heartbeat(serializers.Serializer):
    task_id = schema.IdField()
    attempt_id = schema.IdField()
    lease_expires_at = schema.TimeField()
    late = serializers.BooleanField(help_text="true: the lease was lost (nothing extended); stop the work")


class Completion(serializers.Serializer):
    task_id = schema.IdField()
    state = serializers.CharField(help_text="QUEUED again after a retryable failure with attempts left")
    revision = schema.RevisionField()
    attempt_count = schema.u32()
    max_attempts = schema.u32()
    late = serializers.BooleanField(
        help_text="true: the lease was lost; the result is kept as late evidence and changes nothing"
    )


# ---- parameters and errors ------------------------------------------------------------------

TASK_ID = schema.path_parameter("task_id", "task id", ID_PATTERN)
QUEUE = schema.path_parameter("queue", "queue name", NAME_PATTERN)


def idempotency_key(*, status: int) -> list:
    return schema.idempotency_key(status=status)


AUTH_ERRORS = {401: schema.UNAUTHENTICATED, 403: schema.PERMISSION_DENIED}
UNAVAILABLE = {503: schema.UNAVAILABLE}
BODY_REFUSALS = {411: schema.LENGTH_REQUIRED, 413: schema.TOO_LARGE}
WORKFLOW_NOT_FOUND = (
    "NOT_FOUND: the workflow is not in the caller's namespace or a queue of its definition is not accessible"
)
_KEY_REUSED = "ALREADY_EXISTS: this Idempotency-Key was used for another command"

START_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed command or Idempotency-Key, {schema.BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such definition (version) in the namespace, or a queue of it is not accessible",
    409: _KEY_REUSED,
    **UNAVAILABLE,
}
SIGNAL_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id, command or Idempotency-Key, or a target that is not a signal step of "
    f"the definition, {schema.BODY_LIMITS} (field named); FAILED_PRECONDITION: the instance is finished",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    409: _KEY_REUSED,
    **UNAVAILABLE,
}
CONTROL_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {schema.BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the instance is finished or already in the asked state",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    409: "ABORTED: expected_control_revision is not the current control_revision",
    **UNAVAILABLE,
}
CLAIM_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed queue name or command, {schema.BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such queue in the namespace, or it is not accessible",
    **UNAVAILABLE,
}
ATTEMPT_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {schema.BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the attempt already finished (a lost lease is no error: 200 with late true)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such task in the namespace behind an accessible queue, or no such attempt of it",
    **UNAVAILABLE,
}


NOTE_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id, command or Idempotency-Key, {schema.BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: f"{WORKFLOW_NOT_FOUND}; or corrects names no note of this workflow (field corrects)",
    409: _KEY_REUSED,
    **UNAVAILABLE,
}
ATTENTION_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {schema.BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the instance is not in review",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    **UNAVAILABLE,
}
ASSIGN_ERRORS = ATTENTION_ERRORS | {
    404: f"{WORKFLOW_NOT_FOUND}; or assignee is the actor id of no operator of the namespace (field assignee)"
}


# ---- the whole document -----------------------------------------------------------------------

# Where a client goes next with an answer: (source operation, status) → {link name: (target, parameters, body)}.
_ID = "$response.body#/data/id"
_CONTROL = {"expected_control_revision": "$response.body#/data/control_revision"}
_INSTANCE_LINKS = {
    "GetWorkflow": ("get_workflow", {"id": _ID}, None),
    "SignalWorkflow": ("signal_workflow", {"id": _ID}, None),
    "PauseWorkflow": ("pause_workflow", {"id": _ID}, _CONTROL),
    "ResumeWorkflow": ("resume_workflow", {"id": _ID}, _CONTROL),
    "CancelWorkflow": ("cancel_workflow", {"id": _ID}, _CONTROL),
    "ListWorkflowSignals": ("list_workflow_signals", {"id": _ID}, None),
    "ListWorkflowOperations": ("list_workflow_operations", {"id": _ID}, None),
}
_SIGNAL = {"id": "$response.body#/data/workflow_id", "signal": "$response.body#/data/signal_id"}
_ATTEMPT = {"attempt_id": "$response.body#/data/attempt/id"}
_TASK = {"task_id": "$response.body#/data/task/id"}
_SOURCE_INSTANCE = "$response.body#/data/instance_id"
_SOURCE_ACTIVATION = "$response.body#/data/activation/id"
LINKS = {
    ("start_workflow", "201"): _INSTANCE_LINKS,
    ("get_workflow", "200"): _INSTANCE_LINKS,
    ("pause_workflow", "200"): _INSTANCE_LINKS,
    ("resume_workflow", "200"): _INSTANCE_LINKS,
    ("signal_workflow", "201"): {
        "GetWorkflowSignal": ("get_workflow_signal", _SIGNAL, None),
        "ListWorkflowSignalOperations": ("list_workflow_signal_operations", _SIGNAL, None),
        "GetWorkflow": ("get_workflow", {"id": "$response.body#/data/workflow_id"}, None),
    },
    ("claim_queue_task", "200"): {
        "HeartbeatTask": ("heartbeat_task", _TASK, _ATTEMPT),
        "CompleteTask": ("complete_task", _TASK, _ATTEMPT),
        "GetTaskSource": ("get_task_source", _TASK, None),
    },
    ("add_workflow_note", "201"): {
        "ListWorkflowNotes": ("list_workflow_notes", {"id": "$response.body#/data/workflow_id"}, None),
    },
    ("get_workflow_task", "200"): {"GetTaskSource": ("get_task_source", _TASK, None)},
    ("get_task_source", "200"): {
        "GetWorkflow": ("get_workflow", {"id": _SOURCE_INSTANCE}, None),
        "GetWorkflowActivation": (
            "get_workflow_activation",
            {"id": _SOURCE_INSTANCE, "key": "$response.body#/data/step_key", "activation": _SOURCE_ACTIVATION},
            None,
        ),
        "GetWorkflowTask": (
            "get_workflow_task",
            {"id": _SOURCE_INSTANCE, "task": "$response.body#/data/task_id"},
            None,
        ),
    },
}


def _link(target: str, parameters: dict, body: dict | None) -> dict:
    link = {"operationId": target, "parameters": parameters}
    return link if body is None else link | {"requestBody": body}


def postprocess(result: dict, generator, request, public) -> dict:
    """Request-body limits on every POST and the links between operations (drf-spectacular postprocessing hook)."""
    body_rules = (
        f"one JSON object of at most {limits.max_body_bytes()} bytes (413 beyond, before it is read; a chunked body "
        "is read up to the limit where the server ends it, else 411), nested at most "
        f"{limits.MAX_JSON_DEPTH} levels, number literals of at most {limits.MAX_NUMBER_CHARS} characters, no lone "
        "surrogate in any string or key; an unknown or repeated key is a 400 naming it"
    )
    for item in result["paths"].values():
        for operation in item.values():
            if "requestBody" in operation:
                # Every command is a body, a variant (oneOf) of one too.
                operation["requestBody"] |= {"description": body_rules, "required": True}
            for status, response in operation.get("responses", {}).items():
                links = LINKS.get((operation.get("operationId"), status))
                if links:
                    response["links"] = {name: _link(*link) for name, link in links.items()}
    return result
