from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from history import exactjson


class ExactJSONParser(BaseParser):
    """JSON bodies with number literals kept exactly as sent."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}
        try:
            return exactjson.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"the body is not valid JSON: {exc}") from None
