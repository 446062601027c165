"""Repair campaigns over HTTP (``recovery.campaigns``): GET /v1/campaigns lists them, newest first, GET
/v1/campaigns/{id} one with its counts, GET …/items its ledger in selection order (``outcome`` filters it)
(workflows:read or workflows:recover); POST …/{approve|start|pause|resume|widen|cancel} moves one
(workflows:recover). A campaign is made in the console, from a selection of any size.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.history_views import next_cursor
from api.params import PAGE_PARAMS, list_params, no_params, page_params, path_id, query_check
from api.permissions import scope_required
from api.resources import campaigns
from core import fields
from core.errors import InvalidArgument
from core.ids import ID_PATTERN
from history.models import Campaign, CampaignItem, ItemOutcome, Scope
from history.selectors.pagination import ListKind, keyset_page
from recovery.campaigns import (
    campaign_get,
    campaign_move,
    campaign_tallies,
    campaign_tally,
    campaigns_visible,
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
    http_method_names = ["get"]
    permission_classes = [READ]

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
        command = fields.command_object(request.data, allowed=("note",))
        note = fields.text("note", command["note"], max_length=1024, blank=True) if "note" in command else ""
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
