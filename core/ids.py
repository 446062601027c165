"""Identifier, step-key and revision formats: an id is 32 lowercase hex characters, a revision the decimal string
of a positive uint64, a step key 1-64 ASCII letters, digits, ``_.-`` starting with a letter or digit."""

import re
import uuid

ID_PATTERN = re.compile(r"[0-9a-f]{32}")
STEP_KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
REVISION_PATTERN = re.compile(r"[1-9][0-9]{0,19}")
ROOT_STEP_KEY = "$root"
MAX_UINT64 = 2**64 - 1
MAX_UINT32 = 2**32 - 1


def new_id() -> str:
    return uuid.uuid4().hex


def is_id(value: object) -> bool:
    # type() rather than isinstance: an exactjson.Number (a str subclass) is a JSON number, not text.
    return type(value) is str and ID_PATTERN.fullmatch(value) is not None


def is_step_key(value: object) -> bool:
    return type(value) is str and value.isascii() and STEP_KEY_PATTERN.fullmatch(value) is not None


def parse_revision(value: object) -> int | None:
    """A revision sent as a decimal string, or None when it is not one."""
    if type(value) is not str or not value.isascii() or REVISION_PATTERN.fullmatch(value) is None:
        return None
    number = int(value)
    return number if number <= MAX_UINT64 else None
