"""Request bodies: how one is framed on its way in, its size limit, and the JSON parser."""

import io

from rest_framework.parsers import BaseParser

from api.errors import LengthRequired, json_error
from core import exactjson, limits
from core.errors import InvalidArgument, PayloadTooLarge

# Content-Length is a decimal count of bytes; more digits than this is over any limit.
_MAX_LENGTH_DIGITS = 18


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(f"body must be at most {limits.max_body_bytes()} bytes (WEAVE_MAX_BODY_BYTES)", field="body")


def _declared_length(request) -> int | None:
    text = (request.META.get("CONTENT_LENGTH") or "").strip() if request is not None else ""
    if not text.isdigit() or not text.isascii():
        return None
    return int(text) if len(text) <= _MAX_LENGTH_DIGITS else limits.max_body_bytes() + 1


def chunked_bodies_read(application):
    """WSGI: a body sent without Content-Length (chunked) reaches Django with one, within the body limit.

    Django reads a body only as far as Content-Length declares: without one it would take it as empty. Where the
    server ends the input itself (``wsgi.input_terminated``: gunicorn de-chunks), the body is read here, at most
    one byte past ``limits.max_body_bytes()``; a longer one is left unread and declared one byte over the limit,
    so the parser refuses it (413) as it refuses any declared length over it. Where the server cannot end the
    input (the development server), reading on could block or take the next request for body: the request goes
    on without a length, and ``LengthRequiredMiddleware`` refuses it.
    """

    def framed(environ, start_response):
        if _unframed(environ) and environ.get("wsgi.input_terminated"):
            limit = limits.max_body_bytes()
            body = environ["wsgi.input"].read(limit + 1)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ["wsgi.input"] = io.BytesIO(b"" if len(body) > limit else body)
        return application(environ, start_response)

    return framed


def _unframed(meta) -> bool:
    """A body announced by Transfer-Encoding whose length the application was not told."""
    return "HTTP_TRANSFER_ENCODING" in meta and not meta.get("CONTENT_LENGTH")


def json_body(request):
    """The body as parsed; None for none at all or one without a type (each parses as {}, not as the JSON object
    a command is). For the commands whose fields are all optional: nothing else would refuse a missing body."""
    data = request.data
    return data if request.stream is not None and request.content_type else None


class LengthRequiredMiddleware:
    """A body no one gave a length (a chunked one under the development server or ASGI) is refused, 411 in the
    error envelope, before any view could take it as empty."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if _unframed(request.META):
            return json_error(
                request,
                LengthRequired(
                    f"body must be sent with Content-Length (at most {limits.max_body_bytes()} bytes, "
                    "WEAVE_MAX_BODY_BYTES): this server cannot read a chunked body",
                    field="body",
                ),
            )
        return self.get_response(request)


class ExactJSONParser(BaseParser):
    """JSON bodies with number literals kept exactly as sent, within the body and JSON limits.

    A body over ``limits.max_body_bytes()`` is refused (413) from its Content-Length before it is
    read (a chunked one was given one by ``chunked_bodies_read``, or refused by ``LengthRequiredMiddleware``);
    a stream without one is read at most one byte past the limit. Nesting and number limits are
    ``exactjson.loads``'s, so admin forms and the API refuse the same JSON.
    """

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = limits.max_body_bytes()
        declared = _declared_length((parser_context or {}).get("request"))
        if declared is not None and declared > limit:
            raise _too_large()
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise _too_large()
        if not raw:
            return {}
        try:
            return exactjson.loads(raw.decode("utf-8"))
        except exactjson.JSONLimitError as exc:
            raise InvalidArgument(
                f"body must be JSON within the limits (depth {limits.MAX_JSON_DEPTH}, numbers of at most "
                f"{limits.MAX_NUMBER_CHARS} characters): {exc}",
                field="body",
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"body must be valid JSON: {exc}", field="body") from None
