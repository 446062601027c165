"""Decisions over HTTP: POST /v1/workflows/{id}/decisions states one (workflows:recover, Idempotency-Key) and
answers the decision as far as it ran; GET …/decisions/{decision_id} follows it (workflows:read or :recover);
POST …/decisions/{decision_id}/approve and …/reject answer one held under four eyes (workflows:recover).

Unlike a recovery receipt, the answer is the decision now: a replay of the same key and command answers the same
decision in its current state (``Idempotent-Replayed``), never a second one.
"""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.params import no_params
from api.parsing import json_body
from api.permissions import scope_required
from api.resources import decisions
from api.resources.operations import ApproveCommand, RejectCommand
from core.ids import ID_PATTERN
from core.request_id import request_id_of
from engine.commands import id_argument
from history import idempotency
from history.models import Scope
from recovery.decisions import decision_approve, decision_get, decision_make, decision_reject

DECISION_ID = schema.path_parameter("decision_id", "the decision's id", ID_PATTERN)
READ_ERRORS = {
    400: "INVALID_ARGUMENT: a malformed id or any query parameter (field named)",
    **schema.AUTH_ERRORS,
    404: f"{schema.WORKFLOW_NOT_FOUND}; or no such decision of this workflow (field decision_id)",
    **schema.UNAVAILABLE_ERRORS,
}


class WorkflowDecisionsView(APIView):
    http_method_names = ["post"]
    permission_classes = [scope_required(Scope.RECOVER)]

    @extend_schema(
        operation_id="make_workflow_decision",
        summary="State a decision on an instance in review: its chain of recovery operations runs server-side, "
        "each step an audited operation of its own (workflows:recover)",
        parameters=[schema.WORKFLOW_ID, *schema.idempotency_key(status=201)],
        request=decisions.DecisionCommand,
        responses=schema.responses(decisions.DecisionAnswer, status=201, errors=decisions.DECISION_ERRORS),
    )
    def post(self, request, id):
        decision, receipt = decision_make(
            identity=request.auth,
            instance_id=id_argument(id, "id"),
            idempotency_key=request.headers.get(idempotency.HEADER),
            command=request.data,
            request_id=request_id_of(request),
        )
        return _answer(decision, receipt, status=201)


def _answer(decision, receipt, *, status: int) -> Response:
    """The decision now; a replay of the same key and command says so (``Idempotent-Replayed``) and answers 200."""
    response = Response(decisions.decision(decision), status=200 if receipt.replayed else status)
    if receipt.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


class WorkflowDecisionView(APIView):
    http_method_names = ["get"]
    permission_classes = [scope_required(Scope.READ, Scope.RECOVER)]

    @extend_schema(
        operation_id="get_workflow_decision",
        summary="A decision and how far its chain has run (workflows:read or workflows:recover)",
        parameters=[schema.WORKFLOW_ID, DECISION_ID],
        responses=schema.responses(decisions.DecisionAnswer, errors=READ_ERRORS),
    )
    def get(self, request, id, decision_id):
        no_params(request.query_params)
        found = decision_get(identity=request.auth, instance_id=id, decision_id=decision_id)
        return Response(decisions.decision(found))


def _answer_view(service, command, summary: str) -> type[APIView]:
    """POST …/approve or …/reject of a decision held under four eyes: ``service`` answers it."""

    class DecisionAnswerView(APIView):
        http_method_names = ["post"]
        permission_classes = [scope_required(Scope.RECOVER)]

        @extend_schema(
            operation_id=f"{service.__name__.removeprefix('decision_')}_workflow_decision",
            summary=summary,
            parameters=[schema.WORKFLOW_ID, DECISION_ID, *schema.idempotency_key(status=200)],
            request=command,
            responses=schema.responses(decisions.DecisionAnswer, errors=decisions.ANSWER_ERRORS),
        )
        def post(self, request, id, decision_id):
            decision, receipt = service(
                identity=request.auth,
                instance_id=id_argument(id, "id"),
                decision_id=decision_id,
                idempotency_key=request.headers.get(idempotency.HEADER),
                command=json_body(request),
                request_id=request_id_of(request),
            )
            return _answer(decision, receipt, status=200)

    DecisionAnswerView.__name__ = f"{service.__name__}_view"
    return DecisionAnswerView


DecisionApproveView = _answer_view(
    decision_approve,
    ApproveCommand,
    "Approve a decision held under four eyes: its chain runs now (workflows:recover; not its maker)",
)
DecisionRejectView = _answer_view(
    decision_reject,
    RejectCommand,
    "Reject a decision held under four eyes: nothing runs (workflows:recover; its maker may withdraw it)",
)
