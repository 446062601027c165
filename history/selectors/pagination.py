"""Keyset pages and their signed cursors.

A page reads ``limit + 1`` keys in a unique, index-backed order and never counts. Its cursor
is the key of the last row shown, signed with ``django.core.signing`` under a salt of its own
list kind and bound to the parent ids of the list: a cursor from another list, another
parent, tampered with or not ours does not verify.
"""

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.core import signing
from django.db import models
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL

from core.errors import InvalidArgument, Unavailable
from history.prepared import Prepared

T = TypeVar("T")

MAX_CURSOR_BYTES = 1024


@dataclass(frozen=True)
class ListKind:
    """One list: its name (the signing salt), its model and its descending key fields."""

    name: str
    model: type[models.Model]
    key: tuple[str, ...]

    @property
    def salt(self) -> str:
        return f"weave.history.cursor.{self.name}"


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    # The key of the last item when more rows follow; None on the last page.
    next_key: tuple | None


def keyset_page(
    queryset: QuerySet, *, kind: ListKind, after: tuple | None, limit: int, descending: bool = True
) -> Page:
    """One page of ``queryset`` in ``kind.key`` order, descending (newest first) unless ``descending`` is
    False, starting after the key ``after``.

    The keyset scan reads primary keys only, then the rows by primary key: a scan that stays in
    the (covering) list index is a range scan of ``limit + 1`` entries at any depth, whereas
    MariaDB walks every skipped row when the scan must also fetch whole rows.
    """
    keys = list(_keys(queryset, kind=kind, after=after, limit=limit, descending=descending))
    return _page(keys, lambda found: queryset.in_bulk(found), kind=kind, limit=limit)


# Per list shape, its read compiled once (``prepared_page``); a shape's limit is one of the few a page allows.
_PREPARED: dict[tuple, Prepared] = {}


def prepared_page(
    rows: Callable[..., QuerySet],
    values: tuple,
    *,
    kind: ListKind,
    after: tuple | None,
    limit: int,
    descending: bool = True,
) -> Page:
    """``keyset_page`` of ``rows(*values)`` in one statement compiled once per shape: the lists the API serves most.
    ``rows`` is a module-level function of its values alone.

    The key scan is the same, and the rows are read by the keys it finds, as a derived table in the same
    statement (MariaDB refuses a ``LIMIT`` right inside ``IN``): the scan stays in the list index, and what the
    rows carry (their annotations) is read for the page's rows alone.
    """
    shape = (rows, len(values), kind, after is None, limit, descending)
    read = _PREPARED.get(shape)
    if read is None:
        n, order = len(values), {"kind": kind, "limit": limit, "descending": descending}
        read = _PREPARED[shape] = Prepared(
            lambda *v: _keyed(rows(*v[:n]), _keys(rows(*v[:n]), after=v[n:] or None, **order))
        )
    return page_of_rows(read(*values, *(after or ())), kind=kind, limit=limit, descending=descending)


def page_of_rows(rows: list, *, kind: ListKind, limit: int, descending: bool = True) -> Page:
    """The page of up to ``limit + 1`` rows read in no particular order (a key scan's rows read by its keys), put in
    key order here: the text columns of ``kind.key`` are ids, which the database and Python order alike."""
    rows = sorted(rows, key=lambda row: tuple(getattr(row, name) for name in kind.key), reverse=descending)
    more, items = len(rows) > limit, rows[:limit]
    return Page(items=items, next_key=tuple(getattr(items[-1], name) for name in kind.key) if more else None)


def _keyed(rows: QuerySet, keys: QuerySet) -> QuerySet:
    """``rows`` whose keys the scan ``keys`` finds, in one statement."""
    sql, params = keys.query.sql_with_params()
    return rows.filter(pk__in=RawSQL(f"SELECT * FROM ({sql}) AS page", params))


def _keys(queryset: QuerySet, *, kind: ListKind, after: tuple | None, limit: int, descending: bool) -> QuerySet:
    if after is not None:
        queryset = queryset.filter(keyset_beyond(kind.key, after, lookup="lt" if descending else "gt"))
    order = [f"-{name}" if descending else name for name in kind.key]
    return queryset.order_by(*order).values_list("pk", flat=True)[: limit + 1]


def _page(keys: list, read: Callable[[list], dict], *, kind: ListKind, limit: int) -> Page:
    more, keys = len(keys) > limit, keys[:limit]
    rows = read(keys) if keys else {}
    if len(rows) != len(keys):
        raise Unavailable("rows of this page vanished while it was read")
    items = [rows[key] for key in keys]
    next_key = tuple(getattr(items[-1], name) for name in kind.key) if more else None
    return Page(items=items, next_key=next_key)


def keyset_beyond(fields: Sequence[str], key: Sequence, *, lookup: str) -> Q:
    """Rows strictly after ``key`` in (f1, f2, …) order: ``lt`` when the order is descending, ``gt`` ascending."""
    head, *rest = fields
    condition = Q(**{f"{head}__{lookup}": key[0]})
    if rest:
        condition |= Q(**{head: key[0]}) & keyset_beyond(rest, key[1:], lookup=lookup)
    return condition


def cursor_encode(*, kind: ListKind, parents: Sequence[str], key: tuple) -> str:
    values = [value.isoformat() if isinstance(value, dt.datetime) else value for value in key]
    return signing.dumps({"p": list(parents), "k": values}, salt=kind.salt)


def cursor_decode(*, kind: ListKind, parents: Sequence[str], text: str) -> tuple:
    """The key a cursor carries; INVALID_ARGUMENT unless it is ours, for this list and parents."""
    invalid = InvalidArgument("cursor is not a cursor of this list", field="cursor")
    if len(text.encode("utf-8")) > MAX_CURSOR_BYTES:
        raise InvalidArgument(f"cursor is longer than {MAX_CURSOR_BYTES} bytes", field="cursor")
    try:
        payload = signing.loads(text, salt=kind.salt)
    except signing.BadSignature:
        raise invalid from None
    if not isinstance(payload, dict) or payload.get("p") != list(parents):
        raise invalid
    values = payload.get("k")
    if not isinstance(values, list) or len(values) != len(kind.key):
        raise invalid
    fields = [kind.model._meta.get_field(name) for name in kind.key]
    return tuple(_key_value(field, value, invalid) for field, value in zip(fields, values, strict=True))


def _key_value(field: models.Field, value: object, invalid: InvalidArgument) -> object:
    if isinstance(field, models.DateTimeField):
        try:
            parsed = dt.datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise invalid
        return parsed
    if isinstance(field, models.IntegerField):
        if type(value) is not int:
            raise invalid
        return value
    if not isinstance(value, str):
        raise invalid
    return value
