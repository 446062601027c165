"""POST /v1/workflows/{id}/recovery/{operation}: each recovery operation over HTTP (a route per entry of
OPERATIONS), and the decisions on the proposals an approval policy makes of them
(POST …/proposals/{proposal_id}/approve|reject).

The view only reads the Idempotency-Key header and the JSON body and calls the operation's
service; the receipt's stored text is answered verbatim, so a replay's ``data`` is
byte-identical to the first answer (with a new request_id) and says ``Idempotent-Replayed``.
A command an approval policy holds back answers 202 with the proposal instead of the receipt.
``RecoverySchema`` describes each route as its own OpenAPI operation: its command and its errors.
"""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from api import schema
from api.parsing import json_body
from api.permissions import scope_required
from api.rendering import receipt_response
from api.resources import operations
from core.ids import ID_PATTERN
from core.request_id import request_id_of
from history import idempotency
from history.models import Scope
from recovery.operations import OPERATIONS
from recovery.proposals import proposal_approve, proposal_reject

IDEMPOTENCY_HEADER = idempotency.HEADER


class RecoverySchema(AutoSchema):
    """Each route's own operation: its command, the receipt and the errors it can answer."""

    def get_operation_id(self) -> str:
        return f"recovery_{self.view.operation.replace('-', '_')}"

    def get_summary(self) -> str:
        return f"{OPERATIONS[self.view.operation].command_class.__name__.removesuffix('Command')} (workflows:recover)"

    def get_override_parameters(self) -> list:
        return [schema.INSTANCE_ID, *schema.idempotency_key(status=200)]

    def get_request_serializer(self) -> type[serializers.Serializer] | PolymorphicProxySerializer:
        return operations.command_described(OPERATIONS[self.view.operation])

    def get_response_serializers(self) -> dict:
        takes_quota = OPERATIONS[self.view.operation].takes_quota
        errors = {code: text for code, text in operations.RECOVERY_ERRORS.items() if code != 429 or takes_quota}
        return schema.responses(operations.RecoveryReceipt, errors=errors) | {
            202: OpenApiResponse(
                schema.envelope(operations.ProposalAnswer),
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


def _proposal_answer_view(service, command, answer: type[serializers.Serializer], summary: str, errors: dict):
    class ProposalAnswerView(APIView):
        __doc__ = f"POST /v1/workflows/{{id}}/proposals/{{proposal_id}}/{service.__name__.removeprefix('proposal_')}"
        permission_classes = [scope_required(Scope.RECOVER)]

        @extend_schema(
            operation_id=f"{service.__name__.removeprefix('proposal_')}_recovery_proposal",
            summary=summary,
            parameters=[
                schema.INSTANCE_ID,
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
                command=json_body(request),
                request_id=request_id_of(request),
            )
            return receipt_response(receipt)

    ProposalAnswerView.__name__ = f"{service.__name__}_view"
    return ProposalAnswerView


ProposalApproveView = _proposal_answer_view(
    proposal_approve,
    operations.ApproveCommand,
    operations.RecoveryReceipt,
    "Approve a recovery proposal: its stored command runs now (workflows:recover; not its proposer)",
    operations.APPROVAL_ERRORS,
)
ProposalRejectView = _proposal_answer_view(
    proposal_reject,
    operations.RejectCommand,
    operations.ProposalAnswer,
    "Reject a recovery proposal: nothing runs (workflows:recover; its proposer may withdraw it)",
    operations.DECISION_ERRORS,
)
