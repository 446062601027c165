"""Failure signatures: what a failure is, apart from the instance it happened to.

``error_pattern`` turns an error text into its pattern: the parts that differ from one occurrence to the next —
timestamps, UUIDs and hex ids, numbers, quoted values that carry an id or a number — become one placeholder, so two
errors that differ only there share a pattern and two different messages do not. ``signature_id`` is the
signature's key: the pattern with where it happened (namespace, definition, step, review cause), hashed, so the
failing transaction knows it without reading anything.
"""

import hashlib
import json
import re

MAX_PATTERN = 512

# One placeholder for every varying part: an id and a number in the same place are the same failure.
PLACEHOLDER = "<*>"
# In order: a time before its numbers, a quoted value before the ids and numbers inside it, a signed number
# before the hex ids its digits would start.
_VARYING = (
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| UTC)?)?"),
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    # A quoted value that holds a digit is an id, an amount, a path with a number: its words are not the message.
    re.compile(r"'[^'\n]*\d[^'\n]*'|\"[^\"\n]*\d[^\"\n]*\""),
    # A number stands alone (inside a hex id its digits touch letters).
    re.compile(r"[-+]?\b\d+(?:[.,]\d+)*\b"),
    # Hex of 8 or more digits with at least one decimal digit in it (a word like "deadbeefed" stays a word).
    re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.I),
    re.compile(r"\b0x[0-9a-f]+\b", re.I),
)
_SPACES = re.compile(r"\s+")


def error_pattern(text: str) -> str:
    """The error's pattern: its varying parts as placeholders, runs of white space as one, at most MAX_PATTERN
    characters."""
    for varying in _VARYING:
        text = varying.sub(PLACEHOLDER, text)
    return _SPACES.sub(" ", text).strip()[:MAX_PATTERN]


def result_pattern(text: str) -> str:
    """The pattern of a failed attempt's reported result (exact JSON): each string in it as ``error_pattern`` makes
    it, each number a placeholder, the keys kept, so the message is the failure, not the whole quoted document."""
    try:
        document = json.loads(text)
    except ValueError:
        return error_pattern(text)

    def walk(value):
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, str):
            return error_pattern(value)
        return PLACEHOLDER if isinstance(value, int | float) and not isinstance(value, bool) else value

    return json.dumps(walk(document), sort_keys=True, ensure_ascii=False)[:MAX_PATTERN]


def signature_id(*, namespace_id: str, definition_id: str, step_key: str, cause: str, pattern: str) -> str:
    """The signature's key: 32 hex digits of the SHA-256 of where and what."""
    text = "\x1f".join((namespace_id, definition_id, step_key, cause, pattern))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
