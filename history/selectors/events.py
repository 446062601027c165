"""An instance's timeline (InstanceEvent): filtered by kind, step and sequence, in sequence order either way.

The filters are checked here, once, for the API and the admin alike. A page's events carry what
their links need and the event row does not hold, read in the same query as the page's rows:

- ``parent_task_id``: the task of an attempt, a result event, an inbox record or a task review;
- ``parent_activation_id``: the activation of a wait;
- ``parent_signal_id``: the signal of an inbox record or a signal operation;
- ``audit_record``: which audit an ``audit`` subject is (one of ``AUDIT_RECORDS``), "" when it is missing.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from django.db import connection
from django.db.models import CharField, QuerySet
from django.db.models.expressions import RawSQL

from core.errors import InvalidArgument
from core.identity import Identity
from core.ids import ROOT_STEP_KEY, is_step_key
from history.events import KINDS
from history.models import (
    Attempt,
    ExecutionAudit,
    InboxRecord,
    InstanceEvent,
    ResultEvent,
    SignalOperation,
    Wait,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.access import instance_get_readable
from history.selectors.pagination import ListKind, Page, prepared_page

EVENTS = ListKind("events", InstanceEvent, ("sequence",))
ORDERS = ("asc", "desc")
# The sequence column's range (a signed 64-bit column on every database we run on).
MAX_SEQUENCE = 2**63 - 1
AUDIT_RECORDS = {
    "workflow_operation": WorkflowOperation,
    "execution_audit": ExecutionAudit,
    "signal_operation": SignalOperation,
}


@dataclass(frozen=True)
class EventFilters:
    kinds: tuple[str, ...] = ()
    step_key: str = ""
    after_sequence: int = 0
    descending: bool = False

    def binding(self) -> list[str]:
        """The filters and order as text, for binding a cursor to them."""
        return [
            f"kind={','.join(self.kinds)}",
            f"step_key={self.step_key}",
            f"after_sequence={self.after_sequence}",
            f"order={ORDERS[self.descending]}",
        ]


@dataclass(frozen=True)
class EventPage:
    instance: WorkflowInstance
    page: Page[InstanceEvent]


def sequence_parse(text: str, *, field: str) -> int:
    """A sequence number as sent: decimal digits without sign or leading zero, 0 to MAX_SEQUENCE."""
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0") or int(text) > MAX_SEQUENCE:
        raise InvalidArgument(f"{field} must be a decimal integer from 0 to {MAX_SEQUENCE}", field=field)
    return int(text)


def event_filters(
    *,
    kinds: Sequence[str] = (),
    step_key: str | None = None,
    after_sequence: str | None = None,
    order: str | None = None,
) -> EventFilters:
    """The filters from their text; INVALID_ARGUMENT naming the first bad one.

    ``kinds`` is any number of the timeline's kinds (a repeated kind counts once); ``step_key`` a step
    key or ``$root``; ``after_sequence`` keeps the events after that sequence; ``order`` is asc or desc.
    """
    for kind in kinds:
        if kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {', '.join(KINDS)}", field="kind")
    if step_key is not None and step_key != ROOT_STEP_KEY and not is_step_key(step_key):
        raise InvalidArgument(
            "step_key must be $root or 1-64 ASCII characters: a letter or digit, then letters, digits, '_', '.' or '-'",
            field="step_key",
        )
    if order is not None and order not in ORDERS:
        raise InvalidArgument("order must be asc or desc", field="order")
    return EventFilters(
        kinds=tuple(sorted(set(kinds))),
        step_key=step_key or "",
        after_sequence=0 if after_sequence is None else sequence_parse(after_sequence, field="after_sequence"),
        descending=order == "desc",
    )


@cache
def _parents() -> dict[str, RawSQL]:
    """The annotations naming each event's parents, as SQL written once: as Django expressions, ten correlated
    subqueries took longer to build and compile per page than the database took to answer them."""
    quote = connection.ops.quote_name
    event = quote(InstanceEvent._meta.db_table)
    subject, subject_type = f"{event}.{quote('subject_id')}", f"{event}.{quote('subject_type')}"

    def row(model, where: str = "") -> str:
        return f"FROM {quote(model._meta.db_table)} WHERE {quote(model._meta.pk.column)} = {subject}{where}"

    def column(model, name: str) -> str:
        """The ``name`` column of the ``model`` row the subject id names."""
        return f"(SELECT {quote(model._meta.get_field(name).column)} {row(model)})"

    def by_type(cases: dict[str, str], default: str = "NULL") -> str:
        whens = " ".join(f"WHEN {subject_type} = '{kind}' THEN {sql}" for kind, sql in cases.items())
        return f"CASE {whens} ELSE {default} END"

    audits = " ".join(
        f"WHEN {subject_type} = 'audit' AND EXISTS (SELECT 1 {row(model)}) THEN '{name}'"
        for name, model in AUDIT_RECORDS.items()
    )
    text = {"output_field": CharField()}
    return {
        "parent_task_id": RawSQL(
            by_type(
                {
                    "attempt": column(Attempt, "task"),
                    "result": column(ResultEvent, "task"),
                    "inbox": column(InboxRecord, "task"),
                    "audit": column(ExecutionAudit, "task"),
                }
            ),
            (),
            **text,
        ),
        "parent_activation_id": RawSQL(by_type({"wait": column(Wait, "activation")}), (), **text),
        "parent_signal_id": RawSQL(
            by_type({"inbox": column(InboxRecord, "signal"), "audit": column(SignalOperation, "signal")}), (), **text
        ),
        "audit_record": RawSQL(f"CASE {audits} ELSE '' END", (), **text),
    }


def event_queryset(*, instance_id: str, filters: EventFilters) -> QuerySet[InstanceEvent]:
    """The instance's events matching ``filters``, with what their links need (unordered, unpaged)."""
    queryset = InstanceEvent.objects.filter(instance_id=instance_id)
    if filters.kinds:
        queryset = queryset.filter(kind__in=filters.kinds)
    if filters.step_key:
        queryset = queryset.filter(step_key=filters.step_key)
    if filters.after_sequence:
        queryset = queryset.filter(sequence__gt=filters.after_sequence)
    return queryset.annotate(**_parents())


def event_page(
    *, instance: WorkflowInstance, filters: EventFilters, after: tuple | None, limit: int
) -> Page[InstanceEvent]:
    """One page of the timeline of an instance the caller may see, in sequence order (``filters.descending``)."""
    step_key = (filters.step_key,) if filters.step_key else ()
    after_sequence = (filters.after_sequence,) if filters.after_sequence else ()
    rows = _event_rows(len(filters.kinds), bool(step_key), bool(after_sequence))
    values = (instance.id, *filters.kinds, *step_key, *after_sequence)
    return prepared_page(rows, values, kind=EVENTS, after=after, limit=limit, descending=filters.descending)


@cache
def _event_rows(kinds: int, step_key: bool, after_sequence: bool) -> Callable[..., QuerySet[InstanceEvent]]:
    """``event_queryset`` for one shape of filters, as a function of the instance id and the filters' values."""

    def rows(instance_id: str, *values) -> QuerySet[InstanceEvent]:
        filters = EventFilters(
            kinds=values[:kinds],
            step_key=values[kinds] if step_key else "",
            after_sequence=values[-1] if after_sequence else 0,
        )
        return event_queryset(instance_id=instance_id, filters=filters)

    return rows


def event_list(
    *, identity: Identity, instance_id: str, filters: EventFilters, after: tuple | None, limit: int
) -> EventPage:
    """The instance's timeline, oldest first unless ``filters.descending``; no payload is ever read."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    return EventPage(instance=instance, page=event_page(instance=instance, filters=filters, after=after, limit=limit))
