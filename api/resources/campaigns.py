"""Repair campaigns (``recovery.campaigns``): one decision over a frozen selection, its state and counts, and the
per-item ledger."""

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api.resources import Raw, instances, optional, optional_time, paged
from api.resources.decisions import decision_fields, kind_title
from api.schema import (
    AUTH_ERRORS,
    BODY_LIMITS,
    BODY_REFUSALS,
    KEY_REUSED,
    PAGE_PARAMETERS,
    UNAVAILABLE_ERRORS,
    Command,
    ExactJSONField,
    IdField,
    TimeField,
    reason,
    text_field,
    text_schema,
)
from core import exactjson
from core.times import format_time
from history.models import Campaign, CampaignItem, CampaignState, ItemOutcome
from recovery.campaigns import DEFAULTS, LIMITS, CampaignTally
from recovery.decisions import KINDS, Kind

# The ids or business keys one request may name; a larger fleet is selected by the instance query.
MAX_NAMED = 10_000
MAX_BUSINESS_KEY = 256


def _query_filters() -> dict[str, dict]:
    """The instance query's filters (GET /v1/workflows's parameters but its order and page), each its schema."""
    parameters = instances.workflow_query_parameters()
    paging = {"order", *(parameter.name for parameter in PAGE_PARAMETERS)}
    return {p.name: {**p.type, "description": p.description} for p in parameters if p.name not in paging}


QUERY_FILTERS = _query_filters()
SELECTION_SCHEMA = {
    "oneOf": [
        {
            "type": "object",
            "description": "named instances, each by its id or else its business key (every one of them)",
            "properties": {
                "workflows": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_NAMED,
                    "items": text_schema(max_length=MAX_BUSINESS_KEY),
                }
            },
            "required": ["workflows"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "description": "the instances GET /v1/workflows would list with these filters (at least one), all pages",
            "properties": {
                "query": {
                    "type": "object",
                    "minProperties": 1,
                    "properties": QUERY_FILTERS,
                    "additionalProperties": False,
                }
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ]
}


@extend_schema_field(SELECTION_SCHEMA, component_name="CampaignSelection")
class SelectionField(serializers.JSONField):
    pass


def _make_command(kind: Kind) -> type[serializers.Serializer]:
    """The body of a campaign of one kind of decision: its title, the decision but its revision (each item carries
    its own), its stages and the selection."""
    help_texts = {
        "canary_size": "items run before it is widened",
        "halt_percent": "it halts itself past this share of its items run refused, failed or repaired ineffectively",
        "rate_per_second": "items a second at most",
    }
    stages = {
        name: serializers.IntegerField(
            min_value=1, max_value=LIMITS[name], required=False, help_text=f"{text} (default {DEFAULTS[name]})"
        )
        for name, text in help_texts.items()
    }
    fields = {
        "title": text_field(max_length=200),
        **decision_fields(kind, revision=False),
        **stages,
        "selection": SelectionField(help_text="the instances, frozen at their revisions when it is made"),
    }
    return type(f"Campaign{kind_title(kind)}Command", (Command,), fields)


MakeCommand = PolymorphicProxySerializer(
    component_name="CampaignCommand",
    serializers=[_make_command(kind) for kind in KINDS.values()],
    resource_type_field_name=None,
)


@extend_schema_field({"type": "string", "enum": list(CampaignState.values)}, component_name="CampaignState")
class StateField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "enum": list(ItemOutcome.values)}, component_name="CampaignItemOutcome")
class OutcomeField(serializers.CharField):
    pass


class Counts(serializers.Serializer):
    """Its items by outcome."""

    PENDING = serializers.IntegerField(min_value=0)
    APPLIED = serializers.IntegerField(min_value=0)
    SKIPPED = serializers.IntegerField(min_value=0)
    REFUSED = serializers.IntegerField(min_value=0)
    FAILED = serializers.IntegerField(min_value=0)


class Verification(serializers.Serializer):
    """The verdicts on the repairs of its applied items (every Continue that let one run on is watched)."""

    WATCHING = serializers.IntegerField(min_value=0)
    EFFECTIVE = serializers.IntegerField(min_value=0)
    INEFFECTIVE = serializers.IntegerField(min_value=0)
    REGRESSED = serializers.IntegerField(min_value=0)


class Approval(serializers.Serializer):
    by = serializers.CharField(help_text="the approver's actor id")
    at = TimeField()
    note = serializers.CharField(allow_blank=True)


class CampaignDecision(serializers.Serializer):
    """The decision every item makes, as its maker gave it (each item carries its own revision)."""

    kind = serializers.CharField()
    step_key = serializers.CharField()
    reason = serializers.CharField()
    evidence_ref = serializers.CharField()
    declared = serializers.BooleanField()
    conclusion = serializers.CharField(required=False)
    result = ExactJSONField(required=False)


class CampaignItemSerializer(serializers.Serializer):
    id = IdField()
    title = serializers.CharField()
    state = StateField()
    source = serializers.CharField(help_text="how the selection was made")
    decision = CampaignDecision()
    owner = serializers.CharField(help_text="the login that made it")
    canary_size = serializers.IntegerField(min_value=1)
    widened = serializers.BooleanField(help_text="whether it was widened past its canary")
    halt_percent = serializers.IntegerField(min_value=1, max_value=100)
    rate_per_second = serializers.IntegerField(min_value=1)
    halted_reason = serializers.CharField(allow_blank=True)
    four_eyes = serializers.BooleanField(help_text="a policy covers its decision: a second person approves it")
    approval = Approval(required=False, help_text="under four eyes, once approved")
    total = serializers.IntegerField(min_value=1)
    counts = Counts()
    verification = Verification()
    parent_id = IdField(required=False, help_text="the campaign whose refused, failed and skipped items it takes up")
    created_at = TimeField()
    finished_at = TimeField(required=False)


class CampaignPage(serializers.Serializer):
    items = CampaignItemSerializer(many=True)
    next_cursor = serializers.CharField(required=False)


class LedgerItem(serializers.Serializer):
    position = serializers.IntegerField(min_value=0, help_text="its place in the selection: the canary first")
    workflow_id = IdField()
    revision = serializers.CharField(help_text="the instance's revision when the selection was frozen")
    outcome = OutcomeField()
    code = serializers.CharField(allow_blank=True, help_text="REFUSED, FAILED: the error's code; SKIPPED: why")
    detail = serializers.CharField(allow_blank=True)
    decision_id = IdField(required=False, help_text="APPLIED: the decision made, its receipt")
    done_at = TimeField(required=False)


class LedgerPage(serializers.Serializer):
    items = LedgerItem(many=True)
    next_cursor = serializers.CharField(required=False)


class MoveCommand(Command):
    note = reason(required=False, help_text="what was checked (the preview, the canary's ledger), kept in its log")


MOVE_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed id or body, {BODY_LIMITS} (field named); "
    "FAILED_PRECONDITION: its state does not allow the move (named)",
    **AUTH_ERRORS,
    404: "NOT_FOUND: no such campaign the caller may see",
    **BODY_REFUSALS,
    **UNAVAILABLE_ERRORS,
}
MOVE_ERRORS[403] += "; under four eyes, approving and widening are not its maker's"
MAKE_ERRORS = {
    400: f"INVALID_ARGUMENT: a malformed body or Idempotency-Key, {BODY_LIMITS} (field named)",
    **AUTH_ERRORS,
    404: "NOT_FOUND: a named instance you may not see (selection.workflows, each listed by its index), or no "
    "instance you may see is selected (selection)",
    409: KEY_REUSED,
    **BODY_REFUSALS,
    **UNAVAILABLE_ERRORS,
}


def campaign(row: Campaign, tally: CampaignTally) -> dict:
    data = {
        "id": row.id,
        "title": row.title,
        "state": row.state,
        "source": row.source,
        "decision": _decision(row),
        "owner": row.owner,
        "canary_size": row.canary_size,
        "widened": row.widened,
        "halt_percent": row.halt_percent,
        "rate_per_second": row.rate_per_second,
        "halted_reason": row.halted_reason,
        "four_eyes": row.four_eyes,
        "total": row.total,
        "counts": tally.counts,
        "verification": tally.verification,
    }
    optional(data, "approval", row.approval and {key: row.approval[key] for key in ("by", "at", "note")})
    optional(data, "parent_id", row.parent_id)
    data["created_at"] = format_time(row.created_at)
    optional_time(data, "finished_at", row.finished_at)
    return data


def _decision(row: Campaign) -> dict:
    given = exactjson.loads(row.command)
    data = {name: given[name] for name in ("kind", "step_key", "reason", "evidence_ref", "declared")}
    optional(data, "conclusion", given.get("conclusion"))
    if "result" in given:
        data["result"] = Raw(exactjson.dumps(given["result"]))
    return data


def ledger_item(item: CampaignItem) -> dict:
    data = {
        "position": item.position,
        "workflow_id": item.instance_id,
        "revision": str(item.revision),
        "outcome": item.outcome,
        "code": item.code,
        "detail": item.detail,
    }
    optional(data, "decision_id", item.decision_id)
    optional_time(data, "done_at", item.done_at)
    return data


def campaign_page(rows: list[tuple[Campaign, CampaignTally]], *, next_cursor: str | None) -> dict:
    return paged({}, items=[campaign(*row) for row in rows], next_cursor=next_cursor)


def ledger_page(items: list[CampaignItem], *, next_cursor: str | None) -> dict:
    return paged({}, items=[ledger_item(item) for item in items], next_cursor=next_cursor)
