"""Workflow instances: the start and control commands and their answer (written by the engine), the instance
detail, the instance query and the review summary."""

from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers

from api.resources import optional, optional_raw, optional_time, paged
from api.resources.activations import StepView, step_view
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    BUSINESS_KEY_SCHEMA,
    KEY_REUSED,
    NAME_SCHEMA,
    PAGE_PARAMETERS,
    PERMISSION_DENIED,
    QUERY_TIME_SCHEMA,
    UNAUTHENTICATED,
    UNAVAILABLE,
    UNAVAILABLE_ERRORS,
    WORKFLOW_NOT_FOUND,
    Command,
    ExactJSONField,
    IdField,
    RevisionField,
    StepKeyField,
    TimeField,
    reason,
    text_field,
    u32,
)
from core.ids import MAX_UINT32
from core.times import format_time
from engine.definitions import MAX_SECONDS
from history.models import InstanceState, ReviewCause, StallReason, StopKind, WorkflowInstance
from history.selectors import instance_list
from history.selectors import instances as instance_reads
from history.selectors.pagination import Page
from history.tenancy import NAME_PATTERN


@extend_schema_field({"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"})
class NameField(serializers.CharField):
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


class StartCommand(Command):
    definition = NameField(help_text="a definition name of the caller's namespace")
    version = u32(min_value=1, required=False, help_text="default: the latest version")
    input = ExactJSONField(help_text="any JSON, stored byte-exact")
    business_key = text_field(max_length=256, blank=True, required=False)
    deadline_seconds = serializers.IntegerField(
        min_value=1,
        max_value=MAX_SECONDS,
        required=False,
        allow_null=True,
        help_text="default: the definition's deadline; null: no deadline",
    )


class ControlCommand(Command):
    expected_control_revision = RevisionField(help_text="the instance's current control_revision")
    reason = reason(required=False)


class DefinitionRef(serializers.Serializer):
    name = serializers.CharField()
    version = u32()


def definition_ref(definition) -> dict:
    return {"name": definition.name, "version": definition.version}


class InstanceSummary(serializers.Serializer):
    id = IdField()
    workflow_id = IdField(help_text="the same as id")
    definition = DefinitionRef()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    revision = RevisionField()
    control_revision = RevisionField()
    business_key = serializers.CharField(allow_blank=True)
    created_at = TimeField()
    stop_kind = serializers.CharField(required=False)
    deadline_at = TimeField(required=False)


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
    output = ExactJSONField(
        required=False,
        help_text="the instance's output once it has succeeded: each step's output by step key; absent before",
    )
    steps = StepView(many=True, help_text="every step of the fixed definition, in its order ($root excluded)")
    eligibility = serializers.DictField(help_text="which recovery operations are possible now, and why not")


def instance_detail(detail: instance_reads.InstanceDetail, eligibility: dict) -> dict:
    instance = detail.instance
    data = {
        "id": instance.id,
        "namespace": detail.namespace,
        "definition": {"name": instance.definition.name, "version": instance.definition.version},
        "state": instance.state,
        "paused": instance.paused,
    }
    optional(data, "stop_kind", instance.stop_kind)
    data["revision"] = str(instance.revision)
    data["control_revision"] = str(instance.control_revision)
    optional_time(data, "deadline_at", instance.deadline_at)
    optional(data, "review_reason", instance.review_reason)
    optional(data, "review_cause", instance.review_cause)
    optional(data, "review_step_key", instance.review_step_key)
    optional_time(data, "review_since", instance.review_since)
    data["created_at"] = format_time(instance.created_at)
    data["updated_at"] = format_time(instance.updated_at)
    optional_time(data, "completed_at", instance.completed_at)
    optional_raw(data, "output", instance.output)
    data["steps"] = [step_view(view) for view in detail.steps]
    data["eligibility"] = eligibility
    return data


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


def instance_item(instance: WorkflowInstance) -> dict:
    data = {
        "id": instance.id,
        "definition": definition_ref(instance.definition),
        "state": instance.state,
        "paused": instance.paused,
    }
    optional(data, "review_cause", instance.review_cause)
    optional(data, "review_step_key", instance.review_step_key)
    optional(data, "stop_kind", instance.stop_kind)
    data["business_key"] = instance.business_key
    data["revision"] = str(instance.revision)
    data["created_at"] = format_time(instance.created_at)
    data["updated_at"] = format_time(instance.updated_at)
    optional_time(data, "review_since", instance.review_since)
    return data


class InstancePage(serializers.Serializer):
    items = InstanceItem(many=True)
    next_cursor = serializers.CharField(required=False, help_text="valid only with the same filters and order")


def instance_page(page: Page[WorkflowInstance], *, next_cursor: str | None) -> dict:
    return paged({}, items=[instance_item(i) for i in page.items], next_cursor=next_cursor)


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


def review_summary(summary: instance_list.ReviewSummary) -> dict:
    return {
        "total": summary.total,
        "causes": [{"review_cause": cause, "count": count} for cause, count in summary.causes],
        "definitions": [
            {"definition": definition_ref(definition), "count": count} for definition, count in summary.definitions
        ],
        "definitions_truncated": summary.definitions_truncated,
    }


# ---- the instance query --------------------------------------------------------------------------


def _query(name: str, described: dict, description: str, **extra) -> OpenApiParameter:
    return OpenApiParameter(name, described, OpenApiParameter.QUERY, description=description, **extra)


def _enum_list(name: str, values, description: str) -> OpenApiParameter:
    items = {"type": "array", "minItems": 1, "items": {"type": "string", "enum": list(values)}}
    return _query(name, items, f"{description}; repeat the parameter for several (any of them)", explode=True)


def workflow_query_parameters() -> list[OpenApiParameter]:
    """Every parameter of GET /v1/workflows; each given at most once but ``state``, ``review_cause`` and
    ``stall_reason``."""
    orders = list(instance_list.ORDERS)
    time = "RFC 3339 with its offset, exclusive bound"
    return [
        _enum_list("state", InstanceState.values, "instances in one of these states"),
        _enum_list("review_cause", ReviewCause.values, "instances in review for one of these causes"),
        _query("definition", NAME_SCHEMA, "definition name"),
        _query("version", {"type": "integer", "minimum": 1, "maximum": MAX_UINT32}, "definition version"),
        _query("business_key", BUSINESS_KEY_SCHEMA, "exactly this business key"),
        _query("business_key_prefix", BUSINESS_KEY_SCHEMA, "business keys starting with this text"),
        _query("paused", {"type": "boolean"}, "paused (true) or not (false)"),
        _query("stop_kind", {"type": "string", "enum": list(StopKind.values)}, "the stop intent recorded"),
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
        _enum_list(
            "stall_reason", StallReason.values, "instances the watchdog marked stalled for one of these reasons"
        ),
        _query(
            "signature",
            {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            "instances in review with this failure signature (GET /v1/signatures)",
        ),
        _query(
            "order",
            {"type": "string", "enum": orders, "default": orders[0]},
            "newest first by this time, then by id descending; review_since lists only instances in review",
        ),
        *PAGE_PARAMETERS,
    ]


QUERY_ERRORS = {
    400: "INVALID_ARGUMENT: an unknown, empty or malformed query parameter, one given twice (state, review_cause "
    "and stall_reason may repeat), or a cursor of another query: other filters, order or namespace (field named)",
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    503: UNAVAILABLE,
}


START_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed command or Idempotency-Key, {BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: "NOT_FOUND: no such definition (version) in the namespace, or a queue of it is not accessible",
    409: KEY_REUSED,
    **UNAVAILABLE_ERRORS,
}


CONTROL_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or command, {BODY_LIMITS} (field named); FAILED_PRECONDITION: "
    "the instance is finished or already in the asked state",
    **AUTH_ERRORS,
    **BODY_REFUSALS,
    404: WORKFLOW_NOT_FOUND,
    409: "ABORTED: expected_control_revision is not the current control_revision",
    **UNAVAILABLE_ERRORS,
}
