"""Repair campaigns over HTTP (``recovery.campaigns``): GET /v1/campaigns lists them, newest first, GET
/v1/campaigns/{id} one with its counts, GET …/items its ledger in selection order (``outcome`` filters it)
(workflows:read or workflows:recover); POST /v1/campaigns makes one (workflows:recover, Idempotency-Key) from a
selection of any size, named instances or the instance query's filters; POST …/{approve|start|pause|resume|widen|
cancel} moves one (workflows:recover).
"""

from django.db.models import QuerySet
from django.http import QueryDict
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.history_views import next_cursor
from api.instance_filters import REPEATABLE, instance_query
from api.params import PAGE_PARAMS, list_params, no_params, page_params, path_id, query_check
from api.parsing import json_body
from api.permissions import scope_required
from api.resources import campaigns
from core import fields
from core.errors import InvalidArgument, NotFound
from core.ids import ID_PATTERN
from history import idempotency
from history.models import Campaign, CampaignItem, ItemOutcome, Scope, WorkflowInstance
from history.selectors.instance_list import instances_matching
from history.selectors.pagination import ListKind, keyset_page
from recovery.campaigns import (
    CAMPAIGN_FIELDS,
    campaign_create,
    campaign_get,
    campaign_move,
    campaign_tallies,
    campaign_tally,
    campaigns_visible,
    instances_named,
)

CAMPAIGNS = ListKind("campaigns", Campaign, ("created_at", "id"))
LEDGER = ListKind("campaign_items", CampaignItem, ("position",))
CAMPAIGN_ID = schema.path_parameter("campaign_id", "the campaign's id", ID_PATTERN)
READ = scope_required(Scope.READ, Scope.RECOVER)
# The API's verbs, and the moves they make (recovery.campaigns).
ACTIONS = {
    "approve": "approved",
    "start": "started",
    "pause": "paused",
    "resume": "resumed",
    "widen": "widened",
    "cancel": "cancelled",
}
READ_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id or any query parameter (field named)",
    **schema.AUTH_ERRORS,
    404: "NOT_FOUND: no such campaign the caller may see",
    **schema.UNAVAILABLE_ERRORS,
}


class CampaignListView(APIView):
    http_method_names = ["get", "post"]

    def get_permissions(self):
        return [scope_required(Scope.RECOVER)() if self.request.method == "POST" else READ()]

    @extend_schema(
        operation_id="list_campaigns",
        summary="Repair campaigns of the namespace, the newest first, each with its counts",
        parameters=schema.PAGE_PARAMETERS,
        responses=schema.responses(campaigns.CampaignPage, errors=[400, 401, 403, 503]),
    )
    def get(self, request):
        parents = [request.auth.namespace_id]
        limit, after = list_params(request.query_params, kind=CAMPAIGNS, parents=parents)
        page = keyset_page(campaigns_visible(request.auth), kind=CAMPAIGNS, after=after, limit=limit)
        tallies = campaign_tallies(page.items)
        rows = [(row, tallies[row.id]) for row in page.items]
        cursor = next_cursor(page, kind=CAMPAIGNS, parents=parents)
        return Response(campaigns.campaign_page(rows, next_cursor=cursor))

    @extend_schema(
        operation_id="make_campaign",
        summary="Make a repair campaign: one decision over a selection frozen at its revisions now, READY to be "
        "previewed and started (PROPOSED under four eyes) (workflows:recover)",
        parameters=schema.idempotency_key(status=201),
        request=campaigns.MakeCommand,
        responses=schema.responses(campaigns.CampaignItemSerializer, status=201, errors=campaigns.MAKE_ERRORS),
    )
    def post(self, request):
        body = fields.command_object(json_body(request), allowed=(*CAMPAIGN_FIELDS, "selection"))
        made, receipt = campaign_create(
            identity=request.auth,
            command={name: value for name, value in body.items() if name != "selection"},
            selection=fields.required(body, "selection"),
            select=lambda selection: _selection(request.auth, selection),
            idempotency_key=request.headers.get(idempotency.HEADER),
        )
        response = Response(campaigns.campaign(made, campaign_tally(made)), status=200 if receipt.replayed else 201)
        if receipt.replayed:
            response["Idempotent-Replayed"] = "true"
        return response


def _selection(identity, raw) -> tuple[QuerySet, str]:
    """The instances ``selection`` names and how, as the campaign's source: ``workflows`` (ids or business keys,
    each one checked) or ``query`` (the instance query's filters, as GET /v1/workflows takes them)."""
    if not isinstance(raw, dict) or len(raw) != 1 or not raw.keys() <= {"workflows", "query"}:
        raise InvalidArgument("selection must be an object with one of workflows, query", field="selection")
    if "workflows" in raw:
        return _named(identity, raw["workflows"])
    filters = raw["query"]
    if not isinstance(filters, dict) or not filters:
        raise InvalidArgument(
            "selection.query must be an object of at least one of the instance query's filters",
            field="selection.query",
        )
    params = QueryDict(mutable=True)
    for name, value in filters.items():
        field = f"selection.query.{name}"
        if name not in campaigns.QUERY_FILTERS:
            raise InvalidArgument(f"{field} is not a filter of the instance query", field=field)
        values = value if isinstance(value, list) and name in REPEATABLE else [value]
        if not all(isinstance(one, str | int) for one in values):
            raise InvalidArgument(f"{field} must be a string, a number or a boolean", field=field)
        params.setlist(name, [str(one).lower() if isinstance(one, bool) else str(one) for one in values])
    try:
        query = instance_query(params)
    except InvalidArgument as error:
        raise InvalidArgument(f"selection.query.{error.message}", field=f"selection.query.{error.field}") from None
    return instances_matching(identity=identity, query=query), f"the instance query {params.urlencode()}"


def _named(identity, named) -> tuple[QuerySet, str]:
    if not isinstance(named, list) or not 1 <= len(named) <= campaigns.MAX_NAMED:
        raise InvalidArgument(
            f"selection.workflows must be a list of 1 to {campaigns.MAX_NAMED} instance ids or business keys",
            field="selection.workflows",
        )
    for index, entry in enumerate(named):
        fields.text(f"selection.workflows[{index}]", entry, max_length=campaigns.MAX_BUSINESS_KEY)
    ids, unknown = instances_named(identity, named)
    if unknown:
        more = " …" if len(unknown) > 20 else ""
        listed = "; ".join(f"[{index}] {text}" for index, text in unknown[:20])
        raise NotFound(
            f"selection.workflows names no instance you may see at {listed}{more}", field="selection.workflows"
        )
    return WorkflowInstance.objects.filter(pk__in=ids), f"{len(named)} ids and business keys named"


class CampaignDetailView(APIView):
    http_method_names = ["get"]
    permission_classes = [READ]

    @extend_schema(
        operation_id="get_campaign",
        summary="A repair campaign: its decision, state and counts by outcome",
        parameters=[CAMPAIGN_ID],
        responses=schema.responses(campaigns.CampaignItemSerializer, errors=READ_ERRORS),
    )
    def get(self, request, campaign_id):
        campaign_id = path_id(campaign_id, field="campaign_id")
        no_params(request.query_params)
        found = campaign_get(identity=request.auth, campaign_id=campaign_id)
        return Response(campaigns.campaign(found, campaign_tally(found)))


class CampaignLedgerView(APIView):
    http_method_names = ["get"]
    permission_classes = [READ]

    @extend_schema(
        operation_id="list_campaign_items",
        summary="A campaign's ledger: each item of its selection in order, with its outcome",
        parameters=[
            CAMPAIGN_ID,
            OpenApiParameter("outcome", {"type": "string", "enum": list(ItemOutcome.values)}, description="only these"),
            *schema.PAGE_PARAMETERS,
        ],
        responses=schema.responses(campaigns.LedgerPage, errors=READ_ERRORS),
    )
    def get(self, request, campaign_id):
        campaign_id = path_id(campaign_id, field="campaign_id")
        query = request.query_params
        query_check(query, allowed=(*PAGE_PARAMS, "outcome"))
        outcome = query.get("outcome", "")
        if outcome and outcome not in ItemOutcome.values:
            raise InvalidArgument(f"outcome must be one of {', '.join(ItemOutcome.values)}", field="outcome")
        parents = [campaign_id, outcome]
        limit, after = page_params(query, kind=LEDGER, parents=parents)
        found = campaign_get(identity=request.auth, campaign_id=campaign_id)
        items = CampaignItem.objects.filter(campaign=found)
        if outcome:
            items = items.filter(outcome=outcome)
        page = keyset_page(items, kind=LEDGER, after=after, limit=limit, descending=False)
        cursor = next_cursor(page, kind=LEDGER, parents=parents)
        return Response(campaigns.ledger_page(page.items, next_cursor=cursor))


class CampaignMoveView(APIView):
    http_method_names = ["post"]
    permission_classes = [scope_required(Scope.RECOVER)]
    action_name = ""

    def post(self, request, campaign_id):
        command = fields.command_object(json_body(request), allowed=("note",))
        note = fields.reason("note", command["note"]) if "note" in command else ""
        moved = campaign_move(
            identity=request.auth,
            campaign_id=path_id(campaign_id, field="campaign_id"),
            action=ACTIONS[self.action_name],
            by=request.auth.actor_id,
            note=note,
        )
        return Response(campaigns.campaign(moved, campaign_tally(moved)))


def move_view(action: str):
    """The view of one move, its own operation in the schema."""

    def post(self, request, campaign_id):
        return CampaignMoveView.post(self, request, campaign_id)

    decorated = extend_schema(
        operation_id=f"{action}_campaign",
        summary=f"{action.title()} a repair campaign (workflows:recover)",
        parameters=[CAMPAIGN_ID],
        request=campaigns.MoveCommand,
        responses=schema.responses(campaigns.CampaignItemSerializer, errors=campaigns.MOVE_ERRORS),
    )(post)
    view = type(f"Campaign{action.title()}View", (CampaignMoveView,), {"action_name": action, "post": decorated})
    return view.as_view()
