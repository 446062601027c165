from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response

from core import exactjson
from core.request_id import request_id_of
from history.idempotency import Receipt


class ExactJSONRenderer(BaseRenderer):
    """Wraps every answer in the envelope: ``{request_id, data}`` or ``{request_id, error}``."""

    media_type = "application/json"
    format = "json"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        renderer_context = renderer_context or {}
        request = renderer_context.get("request")
        response = renderer_context.get("response")
        request_id = request_id_of(request) if request is not None else None
        if response is not None and response.status_code >= 400:
            body = {"request_id": request_id, "error": data["error"]}
        else:
            body = {"request_id": request_id, "data": data}
        # A lone surrogate (a client's "\\ud800", echoed in an error's field) cannot be UTF-8: it can
        # only stand inside a JSON string, where its backslash escape is the same JSON text.
        return exactjson.dumps(body).encode("utf-8", "backslashreplace")


def receipt_response(receipt: Receipt) -> Response:
    """A command's stored answer, verbatim; a replay says so in ``Idempotent-Replayed``."""
    response = Response(exactjson.Raw(receipt.text), status=receipt.status)
    if receipt.replayed:
        response["Idempotent-Replayed"] = "true"
    return response
