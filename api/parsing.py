from rest_framework.parsers import BaseParser

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


class ExactJSONParser(BaseParser):
    """JSON bodies with number literals kept exactly as sent, within the body and JSON limits.

    A body over ``limits.max_body_bytes()`` is refused (413) from its Content-Length before it is
    read; a body without one (chunked) is read at most one byte past the limit. Nesting and number
    limits are ``exactjson.loads``'s, so admin forms and the API refuse the same JSON.
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
