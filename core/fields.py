"""Command fields: one rule per kind of field, for engine and recovery commands alike.

Every check takes the field's name and its parsed JSON value (``core.exactjson.loads``
output) and returns what it accepts, or raises INVALID_ARGUMENT naming the field with the
message "<field> must be …" (a stored value over its size limit answers 413). Numbers arrive as
``exactjson.Number``, a ``str`` subclass, so text fields refuse them: the JSON number 7 is not the
string "7". The text rules and sizes come from ``core.limits``.
"""

import re
from typing import Any

from core import exactjson, limits
from core.errors import InvalidArgument, PayloadTooLarge
from core.ids import ROOT_STEP_KEY, is_id, is_step_key, parse_revision

# An integer literal short enough to convert cheaply; the range check follows the conversion.
_INTEGER = re.compile(r"-?[0-9]{1,20}")
_HIDDEN_RULE = "without control, invisible or bidi characters"


def is_text(value: object) -> bool:
    """A JSON string; a number literal (``exactjson.Number``) is not one."""
    return type(value) is str


def refuse(field: str, rule: str) -> InvalidArgument:
    """The one wording of a field refusal: "<field> must be <rule>"."""
    return InvalidArgument(f"{field} must be {rule}", field=field)


def command_object(command: Any, *, allowed: tuple[str, ...] | list[str]) -> dict:
    """The command as a JSON object with no unknown keys (the first unknown, in sorted order, is named)."""
    if not isinstance(command, dict):
        raise InvalidArgument("body must be a JSON object", field="body")
    unknown = sorted(key for key in command if key not in allowed)
    if unknown:
        raise InvalidArgument(f"{unknown[0]!r} is not a field of this command", field=unknown[0])
    return command


def required(command: dict, field: str, *, what: str = "") -> Any:
    if field not in command:
        raise InvalidArgument(f"{field} is required{f' ({what})' if what else ''}", field=field)
    return command[field]


def text(field: str, value: object, *, max_length: int, blank: bool = False) -> str:
    """Free text: at most ``max_length`` characters, no hidden characters, not blank unless allowed."""
    if (
        not is_text(value)
        or len(value) > max_length
        or limits.TEXT_RE.fullmatch(value) is None
        or (not blank and not value.strip())
    ):
        kind = "a string" if blank else "a non-blank string"
        raise refuse(field, f"{kind} of at most {max_length} characters {_HIDDEN_RULE}")
    return value


def reason(field: str, value: object) -> str:
    return text(field, value, max_length=limits.MAX_REASON)


def token(field: str, value: object, *, max_length: int = limits.MAX_EVIDENCE_REF) -> str:
    """A reference such as evidence_ref: 1 to ``max_length`` characters, no whitespace, no hidden characters."""
    if not is_text(value) or len(value) > max_length or limits.TOKEN_RE.fullmatch(value) is None:
        raise refuse(field, f"1 to {max_length} characters without whitespace, control, invisible or bidi characters")
    return value


def revision(field: str, value: object) -> int:
    number = parse_revision(value) if is_text(value) else None
    if number is None:
        raise refuse(field, 'a decimal string of a revision between 1 and 2^64-1, e.g. "7"')
    return number


def identifier(field: str, value: object) -> str:
    if not is_id(value):
        raise refuse(field, "32 lowercase hexadecimal characters")
    return value


def step_key(field: str, value: object) -> str:
    if value == ROOT_STEP_KEY or not is_step_key(value):
        raise refuse(field, "a step key of the definition: a letter or digit, then letters, digits, '_', '.' or '-'")
    return value


def declaration(field: str, value: object) -> bool:
    if value is not True:
        raise refuse(field, "the JSON value true")
    return True


def boolean(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise refuse(field, "true or false")
    return value


def choice(field: str, value: object, choices: tuple[str, ...]) -> str:
    if not is_text(value) or value not in choices:
        raise refuse(field, " or ".join(choices))
    return value


def integer(field: str, value: object, *, low: int, high: int) -> int:
    """A JSON integer in [low, high]; the literal's length is checked before it is converted."""
    if type(value) is int:
        number = value
    elif isinstance(value, exactjson.Number) and _INTEGER.fullmatch(value) is not None:
        number = int(value)
    else:
        number = None
    if number is None or not low <= number <= high:
        raise refuse(field, f"an integer from {low} to {high}")
    return number


def json_text(field: str, value: Any) -> str:
    """A client JSON value as its exact stored text: valid Unicode (keys too), within the stored size."""
    try:
        text = exactjson.dumps(value)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise refuse(field, "valid Unicode JSON: it holds a lone surrogate escape") from None
    except exactjson.JSONLimitError as exc:
        raise refuse(field, f"JSON within the limits: {exc}") from None
    if size > limits.max_json_bytes():
        raise PayloadTooLarge(
            f"{field} must be at most {limits.max_json_bytes()} bytes as UTF-8 JSON (WEAVE_MAX_JSON_BYTES), not {size}",
            field=field,
        )
    return text


def json_form_value(text: str) -> Any:
    """An admin form's JSON text, parsed by the API's rules; ValueError (a form error) when refused."""
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_json_bytes():
        raise ValueError(f"at most {limits.max_json_bytes()} bytes (WEAVE_MAX_JSON_BYTES)")
    return exactjson.loads(text)
