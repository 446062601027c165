"""POST /v1/workflows/{id}/recovery/{operation}: the six operations over HTTP (SPEC §7).

The view only reads the Idempotency-Key header and the JSON body and calls the operation's
service; the receipt's stored text is answered verbatim, so a replay's ``data`` is
byte-identical to the first answer (with a new request_id) and says ``Idempotent-Replayed``.
"""

from rest_framework.response import Response
from rest_framework.views import APIView

from history import exactjson
from history.models import Scope
from recovery.commands import idempotency_key_check
from recovery.operations import SERVICES
from weave_site.api.permissions import scope_required
from weave_site.api.request_id import request_id_of

IDEMPOTENCY_HEADER = "Idempotency-Key"


class RecoveryView(APIView):
    """One recovery operation; ``operation`` is its API name, e.g. ``retry-step``."""

    permission_classes = [scope_required(Scope.RECOVER)]
    operation = ""

    def post(self, request, instance_id: str):
        key = idempotency_key_check(request.headers.get(IDEMPOTENCY_HEADER), field=IDEMPOTENCY_HEADER)
        receipt = SERVICES[self.operation](
            identity=request.auth,
            instance_id=instance_id,
            idempotency_key=key,
            command=request.data,
            request_id=request_id_of(request),
        )
        response = Response(exactjson.Raw(receipt.text), status=receipt.status)
        if receipt.replayed:
            response["Idempotent-Replayed"] = "true"
        return response
