"""OpenAPI description of the history read API: the envelope, every body and every error.

These serializers only document; ``history.api.presenters`` writes the bodies. A field
declared ``required=False`` is absent when it has no value (never null); the contract tests
validate real responses against this schema, so the two cannot drift apart.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from history.api.params import DEFAULT_LIMIT, MAX_LIMIT
from history.ids import ID_PATTERN, REVISION_PATTERN, STEP_KEY_PATTERN


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "weave_site.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "a token issued by manage.py weave_bootstrap"}


ID_SCHEMA = {"type": "string", "pattern": f"^{ID_PATTERN.pattern}$"}


@extend_schema_field(ID_SCHEMA)
class IdField(serializers.CharField):
    pass


@extend_schema_field(
    {"type": "string", "pattern": f"^{REVISION_PATTERN.pattern}$", "description": "unsigned 64-bit, decimal string"}
)
class RevisionField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "format": "date-time", "description": "UTC, RFC 3339 with Z"})
class TimeField(serializers.CharField):
    pass


@extend_schema_field({"description": "client JSON, byte-exact as stored"})
class ExactJSONField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "nullable": True, "additionalProperties": True})
class SnapshotField(serializers.JSONField):
    pass


def _u32(**kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=2**32 - 1, **kwargs)


class ErrorBody(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(required=False)


class ErrorEnvelope(serializers.Serializer):
    request_id = IdField()
    error = ErrorBody()


def envelope(data: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """``{request_id, data}`` around a body, named after it."""
    return type(f"{data.__name__}Envelope", (serializers.Serializer,), {"request_id": IdField(), "data": data()})


_ERROR_MEANING = {
    400: "INVALID_ARGUMENT: a malformed id, step key, query parameter or cursor (field named), or rounds of a "
    "non-POLL activation",
    401: "UNAUTHENTICATED: missing, invalid, revoked or expired bearer token",
    403: "PERMISSION_DENIED: the credential lacks the endpoint's scope",
    404: "NOT_FOUND: the workflow is not in the caller's namespace, a queue of its definition is not accessible, "
    "or the child is not under this parent",
    503: "UNAVAILABLE: a broken relation between the rows read (corruption) or the database is unavailable",
}


def responses(body: type[serializers.Serializer], *, errors: tuple[int, ...] = tuple(_ERROR_MEANING)) -> dict:
    return {200: envelope(body)} | {
        status: OpenApiResponse(ErrorEnvelope, description=_ERROR_MEANING[status]) for status in errors
    }


def _path(name: str, description: str, pattern: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, str, OpenApiParameter.PATH, description=description, pattern=f"^{pattern}$", required=True
    )


WORKFLOW_ID = _path("id", "workflow instance id", ID_PATTERN.pattern)
STEP_KEY = _path("key", "step key of the fixed definition ($root refused)", STEP_KEY_PATTERN.pattern)
ACTIVATION_ID = _path("activation", "activation id", ID_PATTERN.pattern)
SIGNAL_ID = _path("signal", "signal id", ID_PATTERN.pattern)
OPERATION_ID = _path("operation", "the SignalOperation row's own id (not its operation_id)", ID_PATTERN.pattern)
TASK_ID = _path("task", "task id", ID_PATTERN.pattern)
PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit",
        str,
        description=f"page size, ^[1-9][0-9]*$, at most {MAX_LIMIT}; default {DEFAULT_LIMIT}",
        pattern="^[1-9][0-9]*$",
    ),
    OpenApiParameter("cursor", str, description="next_cursor of the previous page of this same list (<= 1024 bytes)"),
]


class TaskSummary(serializers.Serializer):
    id = IdField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = _u32()
    max_attempts = _u32()


class ActivationItem(serializers.Serializer):
    id = IdField()
    step_id = IdField()
    sequence = _u32()
    state = serializers.CharField()
    revision = RevisionField()
    task_id = IdField(required=False, help_text="TASK activations only")
    created_at = TimeField()
    updated_at = TimeField()
    completed_at = TimeField(required=False)


class CurrentActivation(ActivationItem):
    task = TaskSummary(required=False, help_text="TASK: its task; POLL: the query task of the last round")


class StepView(serializers.Serializer):
    id = IdField()
    key = serializers.CharField()
    kind = serializers.CharField()
    state = serializers.CharField()
    revision = RevisionField()
    current_activation_id = IdField(required=False)
    resolution = serializers.JSONField(required=False)
    current_activation = CurrentActivation(required=False)


class ActivationPage(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField(help_text="the instance revision when this page was read")
    step_id = IdField()
    current_activation_id = IdField(required=False)
    items = ActivationItem(many=True)
    next_cursor = serializers.CharField(required=False)


class PollSection(serializers.Serializer):
    first_round = _u32()
    first_round_attempts_used = _u32()
    used_rounds = _u32()
    max_rounds = _u32()
    attempts_per_round = _u32()
    interval_seconds = _u32()
    poll_deadline_at = TimeField()
    round_deadline_at = TimeField()
    last_task_id = IdField(required=False)
    next_round_at = TimeField(required=False)
    last_round_classification = serializers.CharField(required=False)


class WaitSection(serializers.Serializer):
    id = IdField()
    kind = serializers.CharField()
    generation = _u32()
    state = serializers.CharField()
    deadline_at = TimeField()
    fire_at = TimeField(required=False)
    winner_signal_id = IdField(required=False)


class ActivationDetail(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    step = StepView(help_text="the logical step's current view")
    activation = ActivationItem(help_text="the requested activation")
    input = ExactJSONField()
    output = ExactJSONField(required=False, help_text="absent when there is none; null when explicitly null")
    poll = PollSection(required=False)
    wait = WaitSection(required=False)


class PollRoundItem(serializers.Serializer):
    id = IdField()
    activation_id = IdField()
    round = _u32()
    task_id = IdField()
    created_at = TimeField()


class PollRoundPage(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    activation_id = IdField()
    items = PollRoundItem(many=True)
    next_cursor = serializers.CharField(required=False)


class SignalItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    revision = RevisionField()
    name = serializers.CharField()
    payload_version = serializers.CharField(allow_blank=True, help_text='"" on legacy rows')
    target_step_key = serializers.CharField()
    target_activation_sequence = _u32(help_text="0 on legacy rows")
    state = serializers.CharField()
    accepted_at = TimeField()
    expires_at = TimeField()
    disposition = serializers.CharField(required=False)


class SignalPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = SignalItem(many=True)
    next_cursor = serializers.CharField(required=False)


class SignalDetail(SignalItem):
    payload = ExactJSONField()
    correlation_key = serializers.CharField(allow_blank=True)
    actor_id = IdField()
    evidence_ref = serializers.CharField(required=False)
    consumed_wait_id = IdField(required=False)


class SignalOperationItem(serializers.Serializer):
    id = IdField()
    workflow_id = IdField()
    signal_id = IdField()
    operation_id = IdField()
    actor_id = IdField()
    action = serializers.CharField()
    created_at = TimeField()


class SignalOperationPage(serializers.Serializer):
    items = SignalOperationItem(many=True)
    next_cursor = serializers.CharField(required=False)


class SignalOperationDetail(SignalOperationItem):
    reason = serializers.CharField()
    evidence_ref = serializers.CharField(required=False)
    before = SnapshotField(help_text="null for an acceptance")
    after = SnapshotField(help_text="the acceptance snapshot, never rewritten")


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


class WorkflowOperationPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = WorkflowOperationItem(many=True)
    next_cursor = serializers.CharField(required=False)


class DefinitionRef(serializers.Serializer):
    name = serializers.CharField()
    version = _u32()


class InstanceDetail(serializers.Serializer):
    id = IdField()
    namespace = serializers.CharField(help_text="namespace name")
    definition = DefinitionRef()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    stop_kind = serializers.CharField(required=False)
    revision = RevisionField()
    control_revision = RevisionField()
    deadline_at = TimeField(required=False)
    review_reason = serializers.CharField(required=False)
    created_at = TimeField()
    updated_at = TimeField()
    completed_at = TimeField(required=False)
    steps = StepView(many=True, help_text="every step of the fixed definition, in its order ($root excluded)")
    eligibility = serializers.DictField(help_text="which recovery operations are possible now, and why not")


class AttemptItem(serializers.Serializer):
    id = IdField()
    number = _u32()
    worker = serializers.CharField()
    state = serializers.CharField()
    started_at = TimeField()
    lease_expires_at = TimeField(required=False)
    finished_at = TimeField(required=False)
    result = ExactJSONField(required=False)


class TaskBody(serializers.Serializer):
    id = IdField()
    step_key = serializers.CharField()
    activation_id = IdField()
    activation_sequence = _u32()
    round = _u32(required=False, help_text="POLL query tasks: the business round")
    queue = serializers.CharField()
    handler = serializers.CharField()
    priority = serializers.IntegerField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = _u32()
    max_attempts = _u32()
    deadline_at = TimeField(required=False)
    latest_start_at = TimeField(required=False)
    input = ExactJSONField()
    outcome = serializers.CharField(required=False)
    result = ExactJSONField(required=False)
    review_conclusion = serializers.CharField(required=False)
    execution_settled = serializers.BooleanField()
    permit_held = serializers.BooleanField()
    retry_of = IdField(required=False)
    created_at = TimeField()
    updated_at = TimeField()
    attempts = AttemptItem(many=True)


class TaskDetail(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    task = TaskBody()


class CredentialSelf(serializers.Serializer):
    credential_id = IdField()
    namespace_id = IdField()
    actor_id = IdField()
    scopes = serializers.ListField(child=serializers.CharField())
    queues = serializers.JSONField(help_text='"*" for every queue of the namespace, else a list of names')
