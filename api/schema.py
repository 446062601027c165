"""The shared vocabulary of the OpenAPI description: fields, commands, the envelope, errors, parameters, links.

Each resource describes its bodies beside the presenter that writes them (``api.resources``). A field
declared ``required=False`` is absent when it has no value (never null); the contract tests
validate real responses against the served schema, so the two cannot drift apart.
"""

import functools
import re
from collections.abc import Iterable, Mapping

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from api.params import DEFAULT_LIMIT, MAX_LIMIT
from core import limits
from core.ids import ID_PATTERN, MAX_UINT32, MAX_UINT64, STEP_KEY_PATTERN
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


def u32(*, min_value: int = 0, **kwargs) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=min_value, max_value=MAX_UINT32, **kwargs)


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
    return text_field(max_length=limits.MAX_REASON, **kwargs)


def evidence_ref(**kwargs) -> serializers.CharField:
    return token_field(max_length=limits.MAX_EVIDENCE_REF, help_text="never dereferenced", **kwargs)


# ---- commands ------------------------------------------------------------------------------------


class Command(serializers.Serializer):
    """A command body: a JSON object whose unknown keys are refused (400 naming the key)."""


class ClosedCommand(OpenApiSerializerExtension):
    target_class = Command
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        return auto_schema._map_serializer(self.target, direction, bypass_extensions=True) | {
            "additionalProperties": False
        }


# ---- the envelope and the errors -----------------------------------------------------------------


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


AUTH_ERRORS = {401: UNAUTHENTICATED, 403: PERMISSION_DENIED}
UNAVAILABLE_ERRORS = {503: UNAVAILABLE}
BODY_REFUSALS = {411: LENGTH_REQUIRED, 413: TOO_LARGE}
WORKFLOW_NOT_FOUND = (
    "NOT_FOUND: the workflow is not in the caller's namespace or a queue of its definition is not accessible"
)
KEY_REUSED = "ALREADY_EXISTS: this Idempotency-Key was used for another command"


# ---- parameters ----------------------------------------------------------------------------------


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
INSTANCE_ID = path_parameter("instance_id", "workflow instance id", ID_PATTERN)
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

# Values of the instance query's parameters (a name, a time with its offset, a business key).
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


# ---- the whole document --------------------------------------------------------------------------


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
