"""Syntactic checks of the read API's path and query parameters (400 before any lookup)."""

import re
from collections.abc import Sequence

from core.errors import InvalidArgument
from core.ids import ROOT_STEP_KEY, is_id, is_step_key
from history.selectors.pagination import ListKind, cursor_decode

LIMIT_PATTERN = re.compile(r"[1-9][0-9]*")
MAX_LIMIT = 100
DEFAULT_LIMIT = 20


def path_id(value: str, *, field: str) -> str:
    if not is_id(value):
        raise InvalidArgument(f"{field} must be 32 lowercase hexadecimal characters", field=field)
    return value


def path_step_key(value: str) -> str:
    if value == ROOT_STEP_KEY:
        raise InvalidArgument("$root is an internal step and cannot be read", field="key")
    if not is_step_key(value):
        raise InvalidArgument(
            "key must be 1-64 ASCII characters: a letter or digit, then letters, digits, '_', '.' or '-'",
            field="key",
        )
    return value


def _only(query, allowed: Sequence[str], repeatable: Sequence[str] = ()) -> None:
    for name in query:
        if name not in allowed:
            raise InvalidArgument(f"unknown query parameter {name!r}", field=name)
        if len(query.getlist(name)) > 1 and name not in repeatable:
            raise InvalidArgument(f"query parameter {name!r} is repeated", field=name)


def check_names(query, *, allowed: Sequence[str], repeatable: Sequence[str] = ()) -> None:
    """Unknown parameters, and a repeated one that is not ``repeatable``, are refused."""
    _only(query, allowed, repeatable)


def no_params(query) -> None:
    """Detail endpoints accept no query parameter at all."""
    _only(query, ())


def list_params(
    query, *, kind: ListKind, parents: Sequence[str], filters: Sequence[str] = (), repeatable: Sequence[str] = ()
) -> tuple[int, tuple | None]:
    """``(limit, after)`` from ``?limit=&cursor=``; the cursor must belong to this list and parents.

    ``filters`` are the list's other parameters (validated by the caller), of which only
    ``repeatable`` ones may be given more than once.
    """
    _only(query, ("limit", "cursor", *filters), repeatable)
    limit = DEFAULT_LIMIT
    if "limit" in query:
        text = query["limit"]
        if LIMIT_PATTERN.fullmatch(text) is None or len(text) > 3 or int(text) > MAX_LIMIT:
            raise InvalidArgument(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
        limit = int(text)
    after = None
    if "cursor" in query:
        text = query["cursor"]
        if not text:
            raise InvalidArgument("cursor is empty: leave it out for the first page", field="cursor")
        after = cursor_decode(kind=kind, parents=parents, text=text)
    return limit, after
