"""JSON that keeps numbers exactly as written.

Client inputs, outputs, results and payloads are stored as text and must come back
as sent: ``1.10`` stays ``1.10`` and big integers are never squeezed through a float.
``loads`` keeps every number as a ``Number`` holding its literal; ``dumps`` writes it
back verbatim. ``Raw`` embeds already-serialised JSON text into a larger document. The writer
refuses NaN and Infinity (``ValueError``): they are not JSON.

``to_python`` gives the values checks read: integers as ``int``, every other number as an exact
``exactnumber.ExactDecimal``, never a float. ``ExactEncoder``/``ExactDecoder`` keep a Django
``JSONField`` exact the same way (its numbers come back as Decimals and are written as their exact text).

``loads`` refuses what the limits forbid (nesting deeper than ``limits.MAX_JSON_DEPTH``, a number
literal longer than ``limits.MAX_NUMBER_CHARS``) with ``JSONLimitError``, a ``ValueError``, so
every caller that already treats bad JSON as a client error refuses these too. ``to_python``
never converts a literal longer than the limit (``NumberTooLong``), and nothing here recurses
deeper than a bounded number of levels.
"""

import decimal
import json
import math
import re
from itertools import accumulate
from typing import Any

from core import exactnumber, limits

# What loads accepts is at most MAX_JSON_DEPTH deep; writers add a few wrapping levels
# (receipts, fingerprints), so they allow twice that and refuse anything deeper.
_WRITE_DEPTH = 2 * limits.MAX_JSON_DEPTH
# A JSON string literal (escapes included), so brackets inside strings are not counted.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class Number(str):
    """A JSON number literal, kept as its text."""


class Raw:
    """Already-serialised JSON text to be embedded as is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Raw) and other.text == self.text

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


class DuplicateKeyError(ValueError):
    pass


class JSONLimitError(ValueError):
    """JSON beyond a limit of ``core.limits``: a client error, never a crash."""


class TooDeep(JSONLimitError):
    pass


class NumberTooLong(JSONLimitError):
    """A number literal longer than ``limits.MAX_NUMBER_CHARS``: it is never converted."""


def _number(text: str) -> "Number":
    if len(text) > limits.MAX_NUMBER_CHARS:
        raise NumberTooLong(f"a number literal is longer than {limits.MAX_NUMBER_CHARS} characters")
    return Number(text)


def _depth_check(text: str) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH before parsing: one linear pass, brackets outside strings."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    if not brackets:
        return
    deepest = max(accumulate(1 if b in "[{" else -1 for b in brackets))
    if deepest > limits.MAX_JSON_DEPTH:
        raise TooDeep(f"JSON is nested deeper than {limits.MAX_JSON_DEPTH} levels")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes) -> Any:
    """Parse JSON, keeping number literals exact; duplicate keys, NaN and limits broken are errors."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    _depth_check(text)
    return json.loads(
        text,
        parse_float=_number,
        parse_int=_number,
        parse_constant=_reject_constant,
        object_pairs_hook=_pairs,
    )


def dumps(value: Any, *, sort_keys: bool = False, indent: int | None = None) -> str:
    """Compact JSON text, or with ``indent`` one member per line (for people); ``Number`` and ``Raw`` are
    written verbatim, a Decimal as its exact text. NaN and Infinity are refused with ``ValueError``."""
    parts: list[str] = []
    _write(value, parts, 0, sort_keys, " " * indent if indent else "")
    return "".join(parts)


# What json.dumps(text, ensure_ascii=False) writes for a string, without building an encoder each time.
_string = json.encoder.encode_basestring


def _deeper(depth: int) -> int:
    if depth >= _WRITE_DEPTH:
        raise TooDeep(f"JSON is nested deeper than {_WRITE_DEPTH} levels")
    return depth + 1


def _write(value: Any, out: list[str], depth: int, sort_keys: bool, indent: str) -> None:
    # The exact types of an API answer first: most values cost one type() and a comparison or two.
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict or kind is list or kind is tuple:
        _write_container(value, out, depth, sort_keys, indent)
    elif isinstance(value, Number):
        out.append(str.__str__(value))
    elif isinstance(value, Raw):
        out.append(value.text)
    elif isinstance(value, str):
        out.append(_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, (float, decimal.Decimal)):
        # NaN and Infinity have no JSON text.
        if not (value.is_finite() if isinstance(value, decimal.Decimal) else math.isfinite(value)):
            raise ValueError(f"{value} is not JSON")
        out.append(str(value))
    elif isinstance(value, (dict, list, tuple)):
        _write_container(value, out, depth, sort_keys, indent)
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _write_container(value: Any, out: list[str], depth: int, sort_keys: bool, indent: str) -> None:
    depth = _deeper(depth)
    newline = "\n" + indent * depth if indent else ""
    separator, following = newline, "," + newline
    if isinstance(value, dict):
        colon = ": " if indent else ":"
        out.append("{")
        for key in sorted(value) if sort_keys else value:
            out.append(separator + _string(str(key)) + colon)
            _write(value[key], out, depth, sort_keys, indent)
            separator = following
        closing = "}"
    else:
        out.append("[")
        for item in value:
            out.append(separator)
            _write(item, out, depth, sort_keys, indent)
            separator = following
        closing = "]"
    if indent and value:
        out.append("\n" + indent * (depth - 1))
    out.append(closing)


def canonical(value: Any) -> str:
    """Sorted-key compact text, for fingerprints and digests."""
    return dumps(value, sort_keys=True)


def to_python(value: Any) -> Any:
    """Plain Python values for validation, e.g. by jsonschema: an integer literal as ``int``, any other number (a
    Python float too, as the text it is written as) as an exact ``ExactDecimal``: ``19.99`` stays 19.99, never a float.

    A literal longer than ``limits.MAX_NUMBER_CHARS`` raises ``NumberTooLong`` (a ``ValueError``):
    converting unbounded text is refused rather than attempted.
    """
    return _to_python(value, 0)


def _to_python(value: Any, depth: int) -> Any:
    if isinstance(value, Number):
        text = str.__str__(value)
        if len(text) > limits.MAX_NUMBER_CHARS:
            raise NumberTooLong(f"a number literal is longer than {limits.MAX_NUMBER_CHARS} characters")
        if any(c in text for c in ".eE"):
            return exactnumber.decimal_of(text)
        return int(text)
    if isinstance(value, (float, decimal.Decimal)):
        # From Python code (a test, a demo, a stored spec): NaN and Infinity have no JSON text, so they raise
        # ValueError.
        return exactnumber.decimal_of(str(value))
    if isinstance(value, dict):
        depth = _deeper(depth)
        return {k: _to_python(v, depth) for k, v in value.items()}
    if isinstance(value, list):
        depth = _deeper(depth)
        return [_to_python(v, depth) for v in value]
    return value


class ExactEncoder(json.JSONEncoder):
    """A Django ``JSONField`` encoder that writes with ``dumps``: Decimals as their exact text, NaN refused."""

    def encode(self, o: Any) -> str:
        return dumps(o)


class ExactDecoder(json.JSONDecoder):
    """A Django ``JSONField`` decoder that reads a number with a fraction or an exponent as an exact Decimal."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{**options, "parse_float": exactnumber.decimal_of})
