"""JSON with exact client bodies.

Responses are parsed with a small scanner that keeps the text of the client-JSON fields
(``input``, ``output``, ``result``, ``payload``, ``before``, ``after``) as ``RawJSON``, so
numbers such as ``1.10`` or ``12345678901234567890123`` are never reparsed. Requests embed
``RawJSON`` verbatim and write ``Decimal`` as its literal. The scanner recurses, so a body nested
deeper than ``MAX_DEPTH`` is refused before Python's own recursion limit could be met.
"""

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from json.decoder import scanstring
from typing import Any

from weave_sdk.errors import WeaveResponseError

RAW_KEYS = frozenset({"input", "output", "result", "payload", "before", "after"})
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SPACE = re.compile(r"[ \t\n\r]*")
_LITERALS = {"null": None, "true": True, "false": False}
# The server refuses client JSON nested deeper than 64 levels; an answer wraps such a value in a few
# more (envelope, data, item, audit snapshot), so twice that is room for every true answer.
MAX_DEPTH = 128


@dataclass(frozen=True)
class RawJSON:
    """A JSON value as the exact text the server sent."""

    text: str

    def value(self) -> Any:
        """The value, with non-integer numbers as ``Decimal`` (never float)."""
        return json.loads(self.text, parse_float=Decimal)


def loads(text: str) -> Any:
    """The JSON value of ``text``; ValueError when it is not JSON, WeaveResponseError when nested too deep."""
    value, end = _value(text, _skip(text, 0), 0)
    if _skip(text, end) != len(text):
        raise ValueError(f"extra data at {end}")
    return value


def _skip(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()


def _value(text: str, index: int, depth: int) -> tuple[Any, int]:
    char = text[index : index + 1]
    if char in ("{", "[") and depth == MAX_DEPTH:
        raise WeaveResponseError("BAD_RESPONSE", f"the answer nests objects and arrays deeper than {MAX_DEPTH} levels")
    if char == "{":
        return _object(text, index + 1, depth + 1)
    if char == "[":
        return _array(text, index + 1, depth + 1)
    if char == '"':
        return scanstring(text, index + 1)
    for literal, value in _LITERALS.items():
        if text.startswith(literal, index):
            return value, index + len(literal)
    match = _NUMBER.match(text, index)
    if match is None:
        raise ValueError(f"not JSON at {index}")
    number = match.group()
    return (Decimal(number) if match.group(1) or match.group(2) else int(number)), match.end()


def _object(text: str, index: int, depth: int) -> tuple[dict, int]:
    result: dict[str, Any] = {}
    index = _skip(text, index)
    if text[index : index + 1] == "}":
        return result, index + 1
    while True:
        if text[index : index + 1] != '"':
            raise ValueError(f"expected a key at {index}")
        key, index = scanstring(text, index + 1)
        index = _skip(text, index)
        if text[index : index + 1] != ":":
            raise ValueError(f"expected ':' at {index}")
        start = _skip(text, index + 1)
        value, index = _value(text, start, depth)
        result[key] = RawJSON(text[start:index]) if key in RAW_KEYS else value
        index = _skip(text, index)
        if text[index : index + 1] == "}":
            return result, index + 1
        if text[index : index + 1] != ",":
            raise ValueError(f"expected ',' at {index}")
        index = _skip(text, index + 1)


def _array(text: str, index: int, depth: int) -> tuple[list, int]:
    result: list[Any] = []
    index = _skip(text, index)
    if text[index : index + 1] == "]":
        return result, index + 1
    while True:
        value, index = _value(text, _skip(text, index), depth)
        result.append(value)
        index = _skip(text, index)
        if text[index : index + 1] == "]":
            return result, index + 1
        if text[index : index + 1] != ",":
            raise ValueError(f"expected ',' at {index}")
        index += 1


def dumps(value: Any) -> str:
    """Compact JSON; ``RawJSON`` embedded as is, ``Decimal`` written as its literal."""
    if isinstance(value, RawJSON):
        return value.text
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("NaN and infinity are not JSON")
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)
