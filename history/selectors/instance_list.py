"""The instance query (filtered keyset pages of visible instances) and the review summary.

Every page is read newest first along one of the instance indexes, never counted. A filter
with a list of values on the column an index puts in front of the order (``state``,
``definition``, ``review_cause``…) is read as one ordered scan per value, each stopping
after ``limit + 1`` keys, merged by key: a sort over every matching row is never needed.
"""

import datetime as dt
import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cache
from heapq import merge
from itertools import islice

from django.db import connection
from django.db.models import Count, QuerySet
from django.db.models.expressions import RawSQL

from core import clock
from core.errors import Unavailable
from core.identity import Identity
from history.models import InstanceState, Stall, WorkflowDefinition, WorkflowInstance
from history.prepared import Prepared
from history.selectors.access import definitions_kept, visible_rows
from history.selectors.pagination import ListKind, Page, keyset_beyond, page_of_rows

# One list kind per order: a cursor of one order never verifies under another.
ORDERS = {
    name: ListKind(f"workflows.{name}", WorkflowInstance, (name, "id"))
    for name in ("updated_at", "created_at", "review_since")
}
DEFAULT_ORDER = "updated_at"
# Per order, the columns an index of WorkflowInstance puts right after the namespace and before
# the order key, in the order they are preferred to drive the scan (see migration 0008).
ORDERED_BY = {
    "updated_at": ("state", "definition_id", "paused", "stop_kind"),
    "created_at": ("state", "definition_id"),
    "review_since": ("failure_signature_id", "review_cause"),
}
# Past this many values one scan with IN (…) is cheaper than one scan per value.
MAX_SCANS = 16
SUMMARY_DEFINITIONS = 100


@dataclass(frozen=True)
class InstanceQuery:
    """The validated filters of the instance query; empty tuples and None filter nothing."""

    states: tuple[str, ...] = ()
    review_causes: tuple[str, ...] = ()
    definition: str | None = None
    version: int | None = None
    business_key: str | None = None
    business_key_prefix: str | None = None
    paused: bool | None = None
    stop_kind: str | None = None
    queue: str | None = None
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    updated_after: dt.datetime | None = None
    updated_before: dt.datetime | None = None
    in_review_longer_than: int | None = None
    # A failure signature's id: the instances in review with it.
    signature: str | None = None
    # The watchdog's reasons: the instances it marked stalled for one of them.
    stall_reasons: tuple[str, ...] = ()
    order: str = DEFAULT_ORDER

    def binding(self) -> str:
        """A digest of every filter and the order: a cursor carries it and answers only the same query."""
        values = {
            k: (sorted(v) if isinstance(v, tuple) else v.isoformat() if isinstance(v, dt.datetime) else v)
            for k, v in asdict(self).items()
        }
        return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ReviewSummary:
    total: int
    causes: list[tuple[str, int]]
    definitions: list[tuple[WorkflowDefinition, int]]
    # More definitions have instances in review than the summary lists.
    definitions_truncated: bool = field(default=False)


def _definition_ids(*, identity: Identity, query: InstanceQuery) -> list[str] | None:
    """The visible definitions the definition, version and queue filters allow; None when nothing narrows them."""
    if identity.queues is None and query.definition is None and query.version is None and query.queue is None:
        return None
    rows = WorkflowDefinition.objects.filter(namespace_id=identity.namespace_id)
    if query.definition is not None:
        rows = rows.filter(name=query.definition)
    if query.version is not None:
        rows = rows.filter(version=query.version)
    return sorted(
        pk
        for pk, queues in rows.values_list("id", "queues")
        if identity.can_access_queues(queues) and query.queue in (None, *queues)
    )


def _filtered(*, identity: Identity, query: InstanceQuery, definition_ids: list[str] | None) -> QuerySet:
    """Visible instances matching every filter (the scans then split one list of values)."""
    rows = visible_rows(WorkflowInstance.objects.all(), identity)
    if definition_ids is not None:
        rows = rows.filter(definition_id__in=definition_ids)
    if query.states:
        rows = rows.filter(state__in=query.states)
    if query.review_causes:
        rows = rows.filter(review_cause__in=query.review_causes)
    if query.business_key is not None:
        rows = rows.filter(business_key=query.business_key)
    if query.business_key_prefix is not None:
        # Case-insensitive first: its LIKE reads a range of (namespace, business_key) in the column's collation,
        # where MariaDB's case-sensitive LIKE BINARY reads every instance; the second keeps the exact case.
        prefix = query.business_key_prefix
        rows = rows.filter(business_key__istartswith=prefix).filter(business_key__startswith=prefix)
    if query.paused is not None:
        rows = rows.filter(paused=query.paused)
    if query.stop_kind is not None:
        rows = rows.filter(stop_kind=query.stop_kind)
    if query.signature is not None:
        rows = rows.filter(failure_signature_id=query.signature)
    if query.stall_reasons:
        # The marks are few: their instances, then the other filters on them.
        rows = rows.filter(id__in=Stall.objects.filter(reason__in=query.stall_reasons).values("instance_id"))
    ranges = {
        "created_at__gt": query.created_after,
        "created_at__lt": query.created_before,
        "updated_at__gt": query.updated_after,
        "updated_at__lt": query.updated_before,
    }
    rows = rows.filter(**{lookup: value for lookup, value in ranges.items() if value is not None})
    if query.in_review_longer_than is not None:
        rows = rows.filter(review_since__lt=clock.now() - dt.timedelta(seconds=query.in_review_longer_than))
    if query.order == "review_since":
        # Only instances in review have a review_since to order by.
        rows = rows.filter(review_since__isnull=False)
    return rows


def instances_matching(*, identity: Identity, query: InstanceQuery) -> QuerySet:
    """Every visible instance matching ``query``, unread: a selection for a repair campaign to freeze."""
    definition_ids = _definition_ids(identity=identity, query=query)
    if definition_ids == []:
        return WorkflowInstance.objects.none()
    return _filtered(identity=identity, query=query, definition_ids=definition_ids)


def _scans(rows: QuerySet, *, query: InstanceQuery, definition_ids: list[str] | None) -> list[QuerySet]:
    """``rows`` split on the first list filter an index of this order leads with, one queryset per value."""
    lists = {
        "definition_id": definition_ids,
        "state": query.states,
        "paused": None if query.paused is None else [query.paused],
        "stop_kind": None if query.stop_kind is None else [query.stop_kind],
        "review_cause": query.review_causes,
        "failure_signature_id": None if query.signature is None else [query.signature],
    }
    if query.business_key is not None:
        # One business key has few instances: its own index finds them all.
        return [rows]
    for column in ORDERED_BY[query.order]:
        values = lists[column]
        if values and len(values) <= MAX_SCANS:
            return [rows.filter(**{column: value}) for value in values]
    return [rows]


def instance_keys(
    *, identity: Identity, query: InstanceQuery, after: tuple | None, limit: int
) -> tuple[list[QuerySet], int]:
    """The key scans of one page (querysets of ``(order key, id)`` rows) and how many keys each reads."""
    definition_ids = _definition_ids(identity=identity, query=query)
    if definition_ids == []:
        return [], 0
    return _key_scans(identity=identity, query=query, definition_ids=definition_ids, after=after, limit=limit)


def _key_scans(
    *, identity: Identity, query: InstanceQuery, definition_ids: list[str] | None, after: tuple | None, limit: int
) -> tuple[list[QuerySet], int]:
    kind = ORDERS[query.order]
    rows = _filtered(identity=identity, query=query, definition_ids=definition_ids)
    if after is not None:
        rows = rows.filter(keyset_beyond(kind.key, after, lookup="lt"))
    order = [f"-{name}" for name in kind.key]
    splits = _scans(rows, query=query, definition_ids=definition_ids)
    scans = [scan.order_by(*order).values_list(*kind.key)[: limit + 1] for scan in splits]
    return scans, limit + 1


# The filters a prepared key scan takes as its values: each reaches the SQL as it is given. A prefix (rewritten for
# LIKE), a review age (computed from the clock), paused, the stall reasons and a caller limited to some queues build
# their scans each time; the definition, version and queue filters reach the scan as the definitions they allow.
_PREPARED_FILTERS = {
    "states",
    "review_causes",
    "business_key",
    "stop_kind",
    "signature",
    "created_after",
    "created_before",
    "updated_after",
    "updated_before",
}
_DEFINITION_FILTERS = {"definition", "version", "queue", "order"}


def _prepared_rows(*, identity: Identity, query: InstanceQuery, after: tuple | None, limit: int) -> list | None:
    """Up to ``limit + 1`` rows of the page (in no particular order), read with their key scan in one statement
    compiled once per shape of the query; None when it has no such shape."""
    if identity.queues is not None or not connection.features.supports_slicing_ordering_in_compound:
        return None
    shape, values = [], []
    for name, value in asdict(query).items():
        if name in _DEFINITION_FILTERS or value in (None, ()):
            continue
        if name not in _PREPARED_FILTERS:
            return None
        several = isinstance(value, tuple)
        shape.append((name, len(value) if several else None))
        values += value if several else [value]
    definition_ids = _definition_ids(identity=identity, query=query)
    if definition_ids == []:
        return []
    definitions = None if definition_ids is None else len(definition_ids)
    read = _page_read(query.order, tuple(shape), definitions, after is not None, limit)
    return read(identity.namespace_id, *(definition_ids or ()), *values, *(after or ()))


@cache
def _page_read(order: str, shape: tuple, definitions: int | None, after: bool, limit: int) -> Prepared:
    """The rows of the key scan of one shape: a function of the namespace, the definitions' ids, the filters'
    values, the key. The scan is a derived table the rows are read by (MariaDB refuses a LIMIT right inside IN)."""

    def build(namespace_id: str, *values) -> QuerySet:
        rest = list(values)
        definition_ids = None if definitions is None else [rest.pop(0) for _ in range(definitions)]
        filters = {name: rest.pop(0) if n is None else tuple(rest.pop(0) for _ in range(n)) for name, n in shape}
        query = InstanceQuery(order=order, **filters)
        identity = Identity(namespace_id=namespace_id, actor_id="", scopes=frozenset(), queues=None)
        scans, count = _key_scans(
            identity=identity,
            query=query,
            definition_ids=definition_ids,
            after=tuple(rest) if after else None,
            limit=limit,
        )
        sql, params = combined(scans, order=order)[:count].query.sql_with_params()
        return _item_rows().filter(pk__in=RawSQL(f"SELECT id FROM ({sql}) AS page", params))

    return Prepared(build)


def combined(scans: list[QuerySet], *, order: str) -> QuerySet:
    """The scans as one query, merged newest first (each scan keeps its own order and limit)."""
    first, *rest = scans
    if not rest:
        return first
    return first.union(*rest, all=True).order_by(f"-{order}", "-id")


def _read_keys(scans: list[QuerySet], *, order: str, count: int) -> list[tuple]:
    """The first ``count`` keys of the scans merged newest first, in one query where the database can."""
    if not scans:
        return []
    if len(scans) == 1 or connection.features.supports_slicing_ordering_in_compound:
        return list(combined(scans, order=order)[:count])
    runs = [list(scan) for scan in scans]
    return list(islice(merge(*runs, reverse=True), count))


# What a list item shows (api.resources.instances.instance_item): a page never decodes the instances' input and
# output nor the definitions' specs.
ITEM_FIELDS = (
    "id",
    "definition_id",
    "state",
    "paused",
    "review_cause",
    "review_step_key",
    "review_since",
    "stop_kind",
    "business_key",
    "revision",
    "created_at",
    "updated_at",
)


def _item_rows() -> QuerySet[WorkflowInstance]:
    return WorkflowInstance.objects.only(*ITEM_FIELDS)


_items = Prepared(lambda *ids: _item_rows().filter(pk__in=ids))


def instance_list(*, identity: Identity, query: InstanceQuery, after: tuple | None, limit: int) -> Page:
    """A page of the visible instances matching ``query``, newest first by its order key then id."""
    rows = _prepared_rows(identity=identity, query=query, after=after, limit=limit)
    if rows is not None:
        page = page_of_rows(rows, kind=ORDERS[query.order], limit=limit)
        items, next_key = page.items, page.next_key
    else:
        scans, count = instance_keys(identity=identity, query=query, after=after, limit=limit)
        keys = _read_keys(scans, order=query.order, count=count)
        more, keys = len(keys) > limit, keys[:limit]
        ids = [pk for _, pk in keys]
        found = {row.pk: row for row in _items(*ids)} if ids else {}
        if len(found) != len(ids):
            raise Unavailable("instances of this page vanished while it was read")
        items, next_key = [found[pk] for pk in ids], keys[-1] if more else None
    for item in items:
        definition = definitions_kept(item.definition_id)
        if definition is None:
            raise Unavailable(f"instance {item.id} names a definition that does not exist")
        item.definition = definition
    return Page(items=items, next_key=next_key)


def review_summary_queries(*, identity: Identity) -> tuple[QuerySet, QuerySet]:
    """``(cause, count)`` rows and the busiest ``(definition_id, count)`` rows of the visible instances in review."""
    rows = visible_rows(WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW), identity)
    causes = rows.values_list("review_cause").annotate(n=Count("*")).order_by()
    busiest = rows.values_list("definition_id").annotate(n=Count("*")).order_by("-n", "definition_id")
    return causes, busiest[: SUMMARY_DEFINITIONS + 1]


def review_summary(*, identity: Identity) -> ReviewSummary:
    """Visible instances in review counted per cause and per definition (the busiest first, bounded)."""
    cause_rows, busiest_rows = review_summary_queries(identity=identity)
    causes = Counter(dict(cause_rows))
    busiest = list(busiest_rows)
    truncated, busiest = len(busiest) > SUMMARY_DEFINITIONS, busiest[:SUMMARY_DEFINITIONS]
    definitions = WorkflowDefinition.objects.in_bulk([pk for pk, _ in busiest])
    if len(definitions) != len(busiest):
        raise Unavailable("an instance in review names a definition that does not exist")
    return ReviewSummary(
        total=sum(causes.values()),
        causes=sorted(causes.items(), key=lambda item: (-item[1], item[0])),
        definitions=[(definitions[pk], n) for pk, n in busiest],
        definitions_truncated=truncated,
    )
