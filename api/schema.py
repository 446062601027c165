"""OpenAPI description of the history read API: the envelope, every body and every error.

These serializers only document; ``api.presenters`` writes the bodies. A field
declared ``required=False`` is absent when it has no value (never null); the contract tests
validate real responses against this schema, so the two cannot drift apart. The engine and
recovery describe their POST endpoints with the same envelope, fields and helpers.
"""

import functools
import re
from collections.abc import Iterable, Mapping

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from api.params import DEFAULT_LIMIT, MAX_LIMIT
from core import limits
from core.ids import ID_PATTERN, MAX_UINT32, MAX_UINT64, ROOT_STEP_KEY, STEP_KEY_PATTERN
from history.events import KINDS, SUBJECT_TYPES
from history.models import ReviewCause
from history.selectors.events import MAX_SEQUENCE, ORDERS
from history.selectors.pagination import MAX_CURSOR_BYTES


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "a token issued by manage.py weave_bootstrap"}


def decimal_range_pattern(maximum: int) -> str:
    """A regular expression (unanchored) matching exactly the decimal numbers 1..``maximum``, no leading zero.

    Shorter numbers are free; a number as long as ``maximum`` keeps its first i digits and puts a
    smaller digit at position i (anything after), or is ``maximum`` itself.
    """
    digits = str(maximum)
    width = len(digits)
    branches = [f"[1-9][0-9]{{0,{width - 2}}}"] if width > 1 else []
    for i, digit in enumerate(digits):
        low = 1 if i == 0 else 0
        if int(digit) > low:
            top = int(digit) - 1
            rest = width - i - 1
            branches.append(
                digits[:i] + (f"[{low}-{top}]" if top > low else str(low)) + (f"[0-9]{{{rest}}}" if rest else "")
            )
    branches.append(digits)
    return "(?:" + "|".join(branches) + ")"


ID_SCHEMA = {"type": "string", "minLength": 32, "maxLength": 32, "pattern": f"^{ID_PATTERN.pattern}$"}
REVISION_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": len(str(MAX_UINT64)),
    "pattern": f"^{decimal_range_pattern(MAX_UINT64)}$",
    "description": f"unsigned 64-bit, decimal string from 1 to {MAX_UINT64}",
}


_SURROGATES = "\\ud800-\\udfff"


def portable(pattern: str) -> str:
    """A core.limits pattern without its lone-surrogate range, which Rust and Go regex engines refuse to compile.

    JSON Schema strings are Unicode text, so a lone surrogate is outside every schema string anyway: the pattern
    stays exact over what a schema can describe (the descriptions say lone surrogates are refused).
    """
    assert _SURROGATES in pattern, pattern
    return pattern.replace(_SURROGATES, "")


TEXT_PATTERN = portable(limits.TEXT_PATTERN)
TOKEN_PATTERN = portable(limits.TOKEN_PATTERN)


def _character_class(pattern: str) -> str:
    """The one character class of a ``^[...]*$`` / ``^[...]+$`` pattern of core.limits."""
    match = re.fullmatch(r"\^(\[.*\])[*+]\$", pattern)
    assert match is not None, pattern
    return match.group(1)


# Text of core.limits.TEXT_PATTERN holding at least one character of TOKEN_PATTERN: not blank.
NONBLANK_TEXT_PATTERN = (
    f"^{_character_class(TEXT_PATTERN)}*{_character_class(TOKEN_PATTERN)}{_character_class(TEXT_PATTERN)}*$"
)


def text_schema(*, max_length: int, blank: bool = False, description: str = "") -> dict:
    """Free text: no hidden characters (controls, bidi, zero-width, lone surrogates); not blank unless ``blank``."""
    rule = {"pattern": TEXT_PATTERN} if blank else {"minLength": 1, "pattern": NONBLANK_TEXT_PATTERN}
    what = f"{'0' if blank else '1'}-{max_length} characters{'' if blank else ', not all whitespace'}, without "
    what += "control, invisible or bidi characters or lone surrogates"
    description = f"{description}; {what}" if description else what
    return {"type": "string", "maxLength": max_length, **rule, "description": description}


def token_schema(*, max_length: int, description: str = "") -> dict:
    """A token: 1..``max_length`` characters, no whitespace and no hidden characters."""
    what = f"1-{max_length} characters without whitespace, control, invisible or bidi characters or lone surrogates"
    description = f"{description}; {what}" if description else what
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": TOKEN_PATTERN,
        "description": description,
    }


def schema_field(described: dict, base: type[serializers.Field] = serializers.CharField, **kwargs) -> serializers.Field:
    """A ``base`` field documented as ``described`` (a class per field: extend_schema_field marks its class)."""
    field = type(f"Described{base.__name__}", (base,), {})
    return extend_schema_field(described)(field)(**kwargs)


def text_field(*, max_length: int, blank: bool = False, help_text: str = "", **kwargs) -> serializers.CharField:
    return schema_field(text_schema(max_length=max_length, blank=blank, description=help_text), **kwargs)


def token_field(*, max_length: int, help_text: str = "", **kwargs) -> serializers.CharField:
    return schema_field(token_schema(max_length=max_length, description=help_text), **kwargs)


@extend_schema_field(ID_SCHEMA)
class IdField(serializers.CharField):
    pass


@extend_schema_field(REVISION_SCHEMA)
class RevisionField(serializers.CharField):
    pass


@extend_schema_field(
    {"type": "string", "pattern": f"^{STEP_KEY_PATTERN.pattern}$", "description": "step key; $root is refused"}
)
class StepKeyField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "format": "date-time", "description": "UTC, RFC 3339 with Z"})
class TimeField(serializers.CharField):
    pass


@extend_schema_field(
    {
        "type": "string",
        "enum": list(ReviewCause.values),
        "description": "why the instance entered review: "
        + "; ".join(f"{cause.value}: {cause.label}" for cause in ReviewCause),
    },
    component_name="ReviewCause",
)
class ReviewCauseField(serializers.CharField):
    pass


JSON_RULES = (
    f"nested at most {limits.MAX_JSON_DEPTH} levels, number literals of at most {limits.MAX_NUMBER_CHARS} "
    "characters, no lone surrogate in any string or key, at most WEAVE_MAX_JSON_BYTES as UTF-8 (256 KiB by default)"
)


@extend_schema_field({})
class ExactJSONField(serializers.JSONField):
    def __init__(self, *, help_text: str = "client JSON, byte-exact as stored", **kwargs) -> None:
        super().__init__(help_text=f"{help_text}; {JSON_RULES}", **kwargs)


# Any JSON value but null (OpenAPI 3.0 has no type "null": a value without nullable is not null).
@extend_schema_field({"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean")]})
class NotNullJSONField(ExactJSONField):
    def __init__(self, *, help_text: str = "", **kwargs) -> None:
        super().__init__(help_text=f"any JSON value but null{', ' if help_text else ''}{help_text}", **kwargs)


@extend_schema_field({"type": "object", "nullable": True, "additionalProperties": True})
class SnapshotField(serializers.JSONField):
    pass


def u32(*, min_value: int = 0, **kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=min_value, max_value=MAX_UINT32, **kwargs)


class ErrorBody(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField(required=False)


class ErrorEnvelope(serializers.Serializer):
    request_id = IdField()
    error = ErrorBody()


@functools.cache
def envelope(data: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """``{request_id, data}`` around a body, named after it (one class per body: one component)."""
    return type(f"{data.__name__}Envelope", (serializers.Serializer,), {"request_id": IdField(), "data": data()})


UNAUTHENTICATED = "UNAUTHENTICATED: missing, invalid, revoked or expired bearer token"
PERMISSION_DENIED = "PERMISSION_DENIED: the credential lacks the endpoint's scope"
TOO_LARGE = (
    "INVALID_ARGUMENT: the request body is larger than WEAVE_MAX_BODY_BYTES (1 MiB by default), refused before it "
    "is read, a chunked one as soon as it passes the limit (field body, the limit named); or a client JSON value "
    "(input, payload, result) is larger than WEAVE_MAX_JSON_BYTES as UTF-8 (256 KiB by default; the field named)"
)
LENGTH_REQUIRED = (
    "INVALID_ARGUMENT: a body sent chunked, without Content-Length, where the server does not end it for the "
    "application, as the development server or ASGI (field body, the limit named); behind gunicorn it is read"
)
# What every JSON body is refused for, whatever its command (each a 400 naming the field or the limit).
BODY_LIMITS = (
    f"a body nested deeper than {limits.MAX_JSON_DEPTH} levels, a number literal longer than "
    f"{limits.MAX_NUMBER_CHARS} characters, a lone surrogate"
)
UNAVAILABLE = "UNAVAILABLE: a broken relation between the rows read (corruption) or the database is unavailable"

_ERROR_MEANING = {
    400: "INVALID_ARGUMENT: a malformed id, step key, query parameter or cursor (field named), or rounds of a "
    "non-POLL activation",
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: "NOT_FOUND: the workflow is not in the caller's namespace, a queue of its definition is not accessible, "
    "or the child is not under this parent",
    503: UNAVAILABLE,
}


def responses(
    body: type[serializers.Serializer],
    *,
    status: int = 200,
    errors: Iterable[int] | Mapping[int, str] = tuple(_ERROR_MEANING),
) -> dict:
    """The envelope around ``body`` for ``status``, and the error envelope for each error status.

    ``errors`` lists read statuses (described as above) or maps each status to what it means there.
    """
    meanings = errors if isinstance(errors, Mapping) else {code: _ERROR_MEANING[code] for code in errors}
    return {status: envelope(body)} | {
        code: OpenApiResponse(ErrorEnvelope, description=meaning) for code, meaning in meanings.items()
    }


def path_parameter(name: str, description: str, pattern: re.Pattern) -> OpenApiParameter:
    return OpenApiParameter(
        name, str, OpenApiParameter.PATH, description=description, pattern=f"^{pattern.pattern}$", required=True
    )


def idempotency_key(*, status: int) -> list[OpenApiParameter]:
    """The Idempotency-Key request header and the Idempotent-Replayed header of a replayed ``status`` answer."""
    return [
        OpenApiParameter(
            "Idempotency-Key",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": limits.MAX_IDEMPOTENCY_KEY,
                "pattern": limits.IDEMPOTENCY_KEY_PATTERN,
            },
            OpenApiParameter.HEADER,
            required=True,
            description=f"1-{limits.MAX_IDEMPOTENCY_KEY} printable ASCII characters without space; one key per "
            "command in the namespace: the same key and command replay the first answer, the same key with another "
            "command is 409 ALREADY_EXISTS",
        ),
        OpenApiParameter(
            "Idempotent-Replayed",
            str,
            OpenApiParameter.HEADER,
            enum=["true"],
            response=[status],
            description="present on a replay: the data is byte-identical to the first answer",
        ),
    ]


WORKFLOW_ID = path_parameter("id", "workflow instance id", ID_PATTERN)
STEP_KEY = path_parameter("key", "step key of the fixed definition ($root refused)", STEP_KEY_PATTERN)
ACTIVATION_ID = path_parameter("activation", "activation id", ID_PATTERN)
SIGNAL_ID = path_parameter("signal", "signal id", ID_PATTERN)
OPERATION_ID = path_parameter("operation", "the SignalOperation row's own id (not its operation_id)", ID_PATTERN)
TASK_ID = path_parameter("task", "task id", ID_PATTERN)
# A cursor is Django-signed text: URL-safe base64, "." and ":" only.
CURSOR_PATTERN = "^[A-Za-z0-9_.:-]+$"
PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        description=f"page size, decimal without sign or leading zero, 1 to {MAX_LIMIT}; default {DEFAULT_LIMIT}",
    ),
    OpenApiParameter(
        "cursor",
        {"type": "string", "minLength": 1, "maxLength": MAX_CURSOR_BYTES, "pattern": CURSOR_PATTERN},
        description=f"next_cursor of the previous page of this same list (at most {MAX_CURSOR_BYTES} bytes)",
    ),
]

EVENT_FILTERS = ("kind", "step_key", "after_sequence", "order")
EVENT_FILTER_PARAMETERS = [
    OpenApiParameter(
        "kind",
        {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
        style="form",
        explode=True,
        description="only events of these kinds; repeat the parameter for several",
    ),
    OpenApiParameter(
        "step_key",
        {"type": "string", "pattern": f"^(?:{re.escape(ROOT_STEP_KEY)}|{STEP_KEY_PATTERN.pattern})$"},
        description="only events of this step (a step key of the definition, or $root)",
    ),
    OpenApiParameter(
        "after_sequence",
        {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE},
        description="only events after this sequence; decimal without sign or leading zero",
    ),
    OpenApiParameter(
        "order",
        {"type": "string", "enum": list(ORDERS)},
        description="by sequence: asc (default, oldest first) or desc; a cursor is bound to the filters and order",
    ),
]


class TaskSummary(serializers.Serializer):
    id = IdField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()


class ActivationItem(serializers.Serializer):
    id = IdField()
    step_id = IdField()
    sequence = u32()
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
    first_round = u32()
    first_round_attempts_used = u32()
    used_rounds = u32()
    max_rounds = u32()
    attempts_per_round = u32()
    interval_seconds = u32()
    poll_deadline_at = TimeField()
    round_deadline_at = TimeField()
    last_task_id = IdField(required=False)
    next_round_at = TimeField(required=False)
    last_round_classification = serializers.CharField(required=False)


class WaitSection(serializers.Serializer):
    id = IdField()
    kind = serializers.CharField()
    generation = u32()
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
    round = u32()
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
    target_activation_sequence = u32(help_text="0 on legacy rows")
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
    after = schema_field(
        {"type": "object", "additionalProperties": True},
        serializers.JSONField,
        help_text="the acceptance snapshot, never rewritten (never null)",
    )


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


class EventSubject(serializers.Serializer):
    type = serializers.ChoiceField(choices=sorted(set(SUBJECT_TYPES.values())))
    id = IdField()
    step_key = serializers.CharField(required=False, help_text="absent for instance-wide subjects; $root included")


class EventActor(serializers.Serializer):
    kind = serializers.CharField(help_text="engine, worker, client or operator")
    id = serializers.CharField(required=False, help_text="the worker id or actor id; absent for the engine")


class EventLinks(serializers.Serializer):
    workflow = serializers.CharField(required=False, help_text="instance events: the instance")
    activations = serializers.CharField(required=False, help_text="step events: the step's activations")
    activation = serializers.CharField(required=False, help_text="the activation of the subject (or the subject)")
    task = serializers.CharField(required=False, help_text="the execution history of the subject's task")
    signal = serializers.CharField(required=False, help_text="the signal of the subject (or the subject)")
    signal_operation = serializers.CharField(required=False, help_text="a signal audit record")
    operations = serializers.CharField(required=False, help_text="a workflow audit record: the workflow audit")


class EventItem(serializers.Serializer):
    sequence = serializers.IntegerField(min_value=1, max_value=MAX_SEQUENCE, help_text="gap-free per instance")
    kind = serializers.ChoiceField(choices=list(KINDS))
    subject = EventSubject()
    before = serializers.CharField(required=False, help_text="the subject's state before; absent for a creation")
    after = serializers.CharField(required=False, help_text="the subject's state after; absent without a state")
    detail = serializers.CharField(
        required=False, help_text="review cause, inbox disposition, result kind (or LATE) or audit action"
    )
    actor = EventActor()
    operation_id = IdField(required=False)
    audit_id = IdField(required=False)
    reconstructed = serializers.BooleanField(help_text="rebuilt from the rows that existed before the timeline")
    created_at = TimeField()
    links = EventLinks(help_text="paths of the detail reads; no payload is part of an event")


class EventPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = EventItem(many=True)
    next_cursor = serializers.CharField(required=False)


class DefinitionRef(serializers.Serializer):
    name = serializers.CharField()
    version = u32()


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
    review_cause = ReviewCauseField(required=False, help_text="present while the instance is in review")
    review_step_key = StepKeyField(
        required=False, help_text="the step the review concerns; absent for a cause that concerns the whole instance"
    )
    review_since = TimeField(required=False, help_text="when the instance entered review; present while in review")
    created_at = TimeField()
    updated_at = TimeField()
    completed_at = TimeField(required=False)
    steps = StepView(many=True, help_text="every step of the fixed definition, in its order ($root excluded)")
    eligibility = serializers.DictField(help_text="which recovery operations are possible now, and why not")


class LateEvidence(serializers.Serializer):
    event_id = IdField(help_text="the late RESULT event in the task's result stream")
    seq = u32()
    outcome = serializers.CharField(help_text="SUCCEEDED or FAILED, as the worker reported it")
    result = ExactJSONField(required=False)
    recorded_at = TimeField()


class AttemptItem(serializers.Serializer):
    id = IdField()
    number = u32()
    worker = serializers.CharField()
    state = serializers.CharField()
    started_at = TimeField()
    lease_expires_at = TimeField(required=False)
    finished_at = TimeField(required=False)
    result = ExactJSONField(required=False)
    late_evidence = LateEvidence(
        required=False,
        help_text="the completion its worker reported after the lease was lost: recorded, never applied",
    )


class LateEvidenceItem(LateEvidence):
    attempt_id = IdField(required=False, help_text="the attempt whose worker reported it after losing the lease")


_WORKFLOW_PATH = f"/v1/workflows/{ID_PATTERN.pattern}"
_ACTIVATION_PATH = f"{_WORKFLOW_PATH}/steps/{STEP_KEY_PATTERN.pattern}/activations/{ID_PATTERN.pattern}"


def link_field(path: str, description: str, **kwargs) -> serializers.CharField:
    """A path of this API (relative to the server), described by its exact pattern."""
    return schema_field({"type": "string", "pattern": f"^{path}$", "description": description}, **kwargs)


class TaskLinks(serializers.Serializer):
    instance = link_field(_WORKFLOW_PATH, "the instance detail (get_workflow)")
    activation = link_field(_ACTIVATION_PATH, "the source activation (get_workflow_activation)")
    task = link_field(f"{_WORKFLOW_PATH}/tasks/{ID_PATTERN.pattern}", "the execution history (get_workflow_task)")
    source = link_field(f"/v1/tasks/{ID_PATTERN.pattern}/source", "the task's source (get_task_source)")
    rounds = link_field(
        f"{_ACTIVATION_PATH}/rounds",
        "POLL query tasks: the round list of the source activation (list_workflow_poll_rounds)",
        required=False,
    )


class TaskBody(serializers.Serializer):
    id = IdField()
    step_key = serializers.CharField()
    activation_id = IdField()
    activation_sequence = u32()
    round = u32(required=False, help_text="POLL query tasks: the business round")
    queue = serializers.CharField()
    handler = serializers.CharField()
    priority = serializers.IntegerField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()
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
    late_evidence = LateEvidenceItem(
        many=True,
        help_text="every completion reported after its attempt's lease was lost, by seq: recorded, never applied",
    )
    links = TaskLinks()


class TaskDetail(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    task = TaskBody()


class ActivationRef(serializers.Serializer):
    id = IdField()
    sequence = u32()


class PollRoundRef(serializers.Serializer):
    id = IdField()
    round = u32(help_text="the business round whose query the task is")


class TaskSource(serializers.Serializer):
    task_id = IdField()
    namespace = serializers.CharField(help_text="namespace name")
    instance_id = IdField()
    definition = DefinitionRef()
    step_key = StepKeyField()
    activation = ActivationRef(help_text="the activation that sourced the task")
    poll_round = PollRoundRef(required=False, help_text="POLL query tasks only")
    queue = serializers.CharField(help_text="the queue the fixed definition names for the step")
    retry_of = IdField(required=False, help_text="the task this one retries")
    links = TaskLinks()


TASK_SOURCE_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed task_id, or any query parameter (field named)",
    401: UNAUTHENTICATED,
    403: "PERMISSION_DENIED: the credential holds neither workflows:read nor tasks:work",
    404: "NOT_FOUND: no such task in the caller's namespace, or the caller may neither see its workflow "
    "(workflows:read) nor work its queue (tasks:work)",
    503: "UNAVAILABLE: the task and its workflow, activation, poll round or queue disagree (corruption), or the "
    "database is unavailable",
}


class CredentialSelf(serializers.Serializer):
    credential_id = IdField()
    namespace_id = IdField()
    actor_id = IdField()
    scopes = serializers.ListField(child=serializers.CharField())
    queues = serializers.JSONField(help_text='"*" for every queue of the namespace, else a list of names')


# ---- the instance query and the review summary -------------------------------------------

NAME_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[a-z0-9][a-z0-9_.\\-]{0,63}$"}


def _rfc3339_pattern() -> str:
    """RFC 3339 with its offset, exactly as the server parses it: years 0001-9999, each month's days (29 February
    in leap years only), no leap second, at most 6 fraction digits."""
    year = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
    # Divisible by 4 but not by 100, or by 400 (0000 is no year).
    leap_year = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)"
    days = {"(?:0[13578]|1[02])": "(?:0[1-9]|[12][0-9]|3[01])", "(?:0[469]|11)": "(?:0[1-9]|[12][0-9]|30)"}
    month_days = "|".join(f"{month}-{day}" for month, day in days.items())
    date = f"(?:{year}-(?:{month_days}|02-(?:0[1-9]|1[0-9]|2[0-8]))|{leap_year}-02-29)"
    hour, sixty = "(?:[01][0-9]|2[0-3])", "[0-5][0-9]"
    return f"^{date}T{hour}:{sixty}:{sixty}(?:\\.[0-9]{{1,6}})?(?:Z|[+-]{hour}:{sixty})$"


QUERY_TIME_SCHEMA = {"type": "string", "format": "date-time", "pattern": _rfc3339_pattern()}
BUSINESS_KEY_SCHEMA = {"minLength": 1, **text_schema(max_length=256, blank=True)}


def _query(name: str, described: dict, description: str, **extra) -> OpenApiParameter:
    return OpenApiParameter(name, described, OpenApiParameter.QUERY, description=description, **extra)


def _enum_list(name: str, values, description: str) -> OpenApiParameter:
    items = {"type": "array", "minItems": 1, "items": {"type": "string", "enum": list(values)}}
    return _query(name, items, f"{description}; repeat the parameter for several (any of them)", explode=True)


def workflow_query_parameters(*, states, causes, stop_kinds, orders) -> list[OpenApiParameter]:
    """Every parameter of GET /v1/workflows; each given at most once but ``state`` and ``review_cause``."""
    time = "RFC 3339 with its offset, exclusive bound"
    return [
        _enum_list("state", states, "instances in one of these states"),
        _enum_list("review_cause", causes, "instances in review for one of these causes"),
        _query("definition", NAME_SCHEMA, "definition name"),
        _query("version", {"type": "integer", "minimum": 1, "maximum": MAX_UINT32}, "definition version"),
        _query("business_key", BUSINESS_KEY_SCHEMA, "exactly this business key"),
        _query("business_key_prefix", BUSINESS_KEY_SCHEMA, "business keys starting with this text"),
        _query("paused", {"type": "boolean"}, "paused (true) or not (false)"),
        _query("stop_kind", {"type": "string", "enum": list(stop_kinds)}, "the stop intent recorded"),
        _query("queue", NAME_SCHEMA, "instances whose definition uses this queue"),
        _query("created_after", QUERY_TIME_SCHEMA, time),
        _query("created_before", QUERY_TIME_SCHEMA, time),
        _query("updated_after", QUERY_TIME_SCHEMA, time),
        _query("updated_before", QUERY_TIME_SCHEMA, time),
        _query(
            "in_review_longer_than",
            {"type": "integer", "minimum": 0, "maximum": MAX_UINT32},
            "seconds: instances in review since longer than this",
        ),
        _query(
            "order",
            {"type": "string", "enum": list(orders), "default": orders[0]},
            "newest first by this time, then by id descending; review_since lists only instances in review",
        ),
        *PAGE_PARAMETERS,
    ]


QUERY_ERRORS = {
    400: "INVALID_ARGUMENT: an unknown, empty or malformed query parameter, one given twice (state and "
    "review_cause may repeat), or a cursor of another query: other filters, order or namespace (field named)",
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    503: UNAVAILABLE,
}


class InstanceItem(serializers.Serializer):
    id = IdField()
    definition = DefinitionRef()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    review_cause = serializers.CharField(required=False, help_text="present while in review")
    review_step_key = serializers.CharField(required=False, help_text="the step the cause concerns, if one")
    stop_kind = serializers.CharField(required=False)
    business_key = serializers.CharField(allow_blank=True)
    revision = RevisionField()
    created_at = TimeField()
    updated_at = TimeField()
    review_since = TimeField(required=False, help_text="present while in review")


class InstancePage(serializers.Serializer):
    items = InstanceItem(many=True)
    next_cursor = serializers.CharField(required=False, help_text="valid only with the same filters and order")


class CauseCount(serializers.Serializer):
    review_cause = serializers.CharField()
    count = serializers.IntegerField(min_value=1)


class DefinitionCount(serializers.Serializer):
    definition = DefinitionRef()
    count = serializers.IntegerField(min_value=1)


class ReviewSummary(serializers.Serializer):
    total = serializers.IntegerField(min_value=0, help_text="visible instances in review")
    causes = CauseCount(many=True, help_text="per review cause, the largest first")
    definitions = DefinitionCount(many=True, help_text="per definition, the busiest first, at most 100")
    definitions_truncated = serializers.BooleanField(help_text="more definitions have instances in review")


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
