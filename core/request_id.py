"""Every request gets a 32-hex request id, echoed in X-Request-Id and in the envelope."""

from core.ids import new_id
from core.logs import log_context


def request_id_of(request) -> str:
    django_request = getattr(request, "_request", request)
    if not hasattr(django_request, "weave_request_id"):
        django_request.weave_request_id = new_id()
    return django_request.weave_request_id


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = request_id_of(request)
        with log_context(request_id=request_id):
            response = self.get_response(request)
        response["X-Request-Id"] = request_id
        return response
