"""JSON that keeps numbers exactly as written.

Client inputs, outputs, results and payloads are stored as text and must come back
as sent: ``1.10`` stays ``1.10`` and big integers are never squeezed through a float.
``loads`` keeps every number as a ``Number`` holding its literal; ``dumps`` writes it
back verbatim. ``Raw`` embeds already-serialised JSON text into a larger document.
"""

import json
from typing import Any


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
    """Parse JSON, keeping number literals exact; duplicate keys and NaN are errors."""
    return json.loads(
        text,
        parse_float=Number,
        parse_int=Number,
        parse_constant=_reject_constant,
        object_pairs_hook=_pairs,
    )


def dumps(value: Any) -> str:
    """Compact JSON text; ``Number`` and ``Raw`` are written verbatim."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, Number):
        out.append(str.__str__(value))
    elif isinstance(value, Raw):
        out.append(value.text)
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(json.dumps(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append(json.dumps(str(key), ensure_ascii=False))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def canonical(value: Any) -> str:
    """Sorted-key compact text, for fingerprints and digests."""
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + canonical(value[k]) for k in sorted(value))
            + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    return dumps(value)


def to_python(value: Any) -> Any:
    """Plain Python values (int/float) for validation, e.g. by jsonschema."""
    if isinstance(value, Number):
        text = str.__str__(value)
        if any(c in text for c in ".eE"):
            return float(text)
        return int(text)
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_python(v) for v in value]
    return value
