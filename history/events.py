"""The one writer of the instance timeline (``InstanceEvent``).

Every save of a row the timeline follows — the instance, its steps, activations, tasks, attempts,
waits, signals, inbox records, result events and the three audits — passes through
``_row_saved`` (a ``post_save`` receiver, so no write path can forget it): a created row writes
``<subject>.created``, a row whose ``state`` changed since it was read writes ``<subject>.state``
with before → after. The event is inserted in the transaction of the save, so a rollback takes
it away with the change. Rows written by ``QuerySet.update`` or ``bulk_create`` bypass it: the
engine writes no state that way, except steps bulk-created PENDING, their initial state (a
subject without events is in its initial state), and the root step, whose event ``row_created``
writes.

``sequence`` is the instance's last sequence + 1, read at READ COMMITTED while the writer holds
the instance's row lock (every engine transaction takes it first), so it has no gaps; the unique
(instance, sequence) index turns a writer without the lock into an error instead of a gap.

The insert reads the last sequence itself (``INSERT … SELECT``): one statement, no read before it.
Inside ``events_batched`` (every ``atomic_with_retry`` body) the events wait and go in together,
one multi-row insert at the end of the body, or earlier when a statement could read them or a
savepoint opens (so a savepoint never holds events of its parent); an event written inside a
savepoint of the body is inserted at once.

Who acted comes from ``acting``: the entry points that act for a client, a worker or an
operator wrap their transaction in it; everything else is the engine.
"""

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection
from django.db.models.signals import post_save

from core.identity import Identity
from history import models

ENGINE = "engine"
WORKER = "worker"
CLIENT = "client"
OPERATOR = "operator"


@dataclass(frozen=True)
class Actor:
    kind: str  # engine | worker | client | operator
    id: str = ""
    operation_id: str = ""
    # The recovery operation (retry-step, resolve-step, …) whose writes these are: a state a person produced.
    repair: str = ""


_ENGINE_ACTOR = Actor(ENGINE)
_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("weave_event_actor", default=None)


@contextlib.contextmanager
def acting(kind: str, actor_id: str, *, operation_id: str = "", repair: str = "") -> Iterator[Actor]:
    """Every event written inside is attributed to this actor (and operation, and repair, when there is one)."""
    actor = Actor(kind, actor_id, operation_id, repair)
    token = _actor.set(actor)
    try:
        yield actor
    finally:
        _actor.reset(token)


def acting_for(
    identity: Identity, *, operation_id: str = "", repair: str = ""
) -> contextlib.AbstractContextManager[Actor]:
    """``acting`` for whoever holds ``identity``: an API credential is a client, an admin user an operator."""
    kind = CLIENT if identity.credential_id is not None else OPERATOR
    return acting(kind, identity.actor_id, operation_id=operation_id, repair=repair)


# subject type of each followed model; audits share one subject type.
SUBJECT_TYPES: dict[type, str] = {
    models.WorkflowInstance: "instance",
    models.Step: "step",
    models.Activation: "activation",
    models.Task: "task",
    models.Attempt: "attempt",
    models.Wait: "wait",
    models.Signal: "signal",
    models.InboxRecord: "inbox",
    models.ResultEvent: "result",
    models.WorkflowOperation: "audit",
    models.ExecutionAudit: "audit",
    models.SignalOperation: "audit",
}
KINDS = tuple(
    sorted(
        {f"{subject}.created" for subject in SUBJECT_TYPES.values()}
        | {f"{subject}.state" for model, subject in SUBJECT_TYPES.items() if hasattr(model, "state_at_load")}
    )
)

# Where a row belongs never changes after it is written, so (instance, step key) of an
# activation, step or task is remembered by id; bounded so a long-lived process stays small.
_PLACE_CACHE_SIZE = 50_000
_places: dict[tuple[str, str], tuple[str, str]] = {}


def _remember(kind: str, pk: str, place: tuple[str, str]) -> tuple[str, str]:
    if len(_places) >= _PLACE_CACHE_SIZE:
        _places.clear()
    _places[(kind, pk)] = place
    return place


def _step_place(step_id: str) -> tuple[str, str]:
    place = _places.get(("step", step_id))
    if place is None:
        row = models.Step.objects.filter(pk=step_id).values_list("instance_id", "key").first()
        place = _remember("step", step_id, row) if row else ("", "")
    return place


def _activation_place(activation_id: str | None) -> tuple[str, str]:
    if not activation_id:
        return "", ""
    place = _places.get(("activation", activation_id))
    if place is None:
        step_id = models.Activation.objects.filter(pk=activation_id).values_list("step_id", flat=True).first()
        place = _remember("activation", activation_id, _step_place(step_id)) if step_id else ("", "")
    return place


def _task_place(task_id: str) -> tuple[str, str]:
    place = _places.get(("task", task_id))
    if place is None:
        activation_id = models.Task.objects.filter(pk=task_id).values_list("source_activation_id", flat=True).first()
        place = _remember("task", task_id, _activation_place(activation_id)) if activation_id else ("", "")
    return place


def _known(row, field: str):
    """The related row the caller passed in (already in memory), or None: using it saves a read."""
    descriptor = getattr(type(row), field)
    return getattr(row, field) if descriptor.is_cached(row) else None


def _place(row) -> tuple[str, str]:
    """(instance id, step key) of a followed row; the step key is blank for instance-wide rows."""
    if isinstance(row, models.WorkflowInstance):
        return row.id, ""
    if isinstance(row, models.Step):
        return _remember("step", row.id, (row.instance_id, row.key))
    if isinstance(row, models.Activation):
        step = _known(row, "step")
        instance_id, key = _place(step) if step is not None else _step_place(row.step_id)
        return _remember("activation", row.id, (instance_id or row.instance_id, key))
    if isinstance(row, models.Task):
        activation = _known(row, "source_activation")
        instance_id, key = _place(activation) if activation is not None else _activation_place(row.source_activation_id)
        return _remember("task", row.id, (instance_id or row.source_instance_id, key))
    if isinstance(row, models.Attempt | models.ResultEvent | models.ExecutionAudit):
        task = _known(row, "task")
        return _place(task) if task is not None else _task_place(row.task_id)
    if isinstance(row, models.Wait):
        step = _known(row, "step")
        return row.instance_id, step.key if step is not None else _step_place(row.step_id)[1]
    if isinstance(row, models.Signal):
        return row.workflow_id, row.target_step_key
    if isinstance(row, models.InboxRecord):
        activation = _known(row, "activation")
        key = _place(activation)[1] if activation is not None else _activation_place(row.activation_id)[1]
        if not key and row.signal_id:
            key = _signal_step_key(row)
        return row.instance_id, key or ""
    if isinstance(row, models.WorkflowOperation):
        return row.workflow_id, row.step_key
    if isinstance(row, models.SignalOperation):
        return row.workflow_id, _signal_step_key(row)
    raise TypeError(f"{type(row).__name__} is not followed by the timeline")


def _signal_step_key(row) -> str:
    signal = _known(row, "signal")
    if signal is not None:
        return signal.target_step_key
    return models.Signal.objects.filter(pk=row.signal_id).values_list("target_step_key", flat=True).first() or ""


def _detail(row, subject: str) -> str:
    if subject == "instance":
        return row.review_cause
    if subject == "inbox":
        return row.disposition
    if subject == "result":
        return "LATE" if row.late else row.kind
    if subject == "audit":
        return row.action
    return ""


def _events_insert(rows: list[models.InstanceEvent]) -> None:
    """One INSERT … SELECT for ``rows``: each takes its instance's last sequence + its place among them.

    The sequence is read by the insert itself, under the instance lock the caller holds, so what
    earlier statements of the transaction wrote (or a rolled-back savepoint took away) is counted
    as it is, with no read of its own.
    """
    table = connection.ops.quote_name(_TABLE)
    columns = [f for f in models.InstanceEvent._meta.concrete_fields if f.attname != "sequence"]
    names = [connection.ops.quote_name(f.column) for f in columns]
    place: dict[str, int] = {}
    params: list = []
    for row in rows:
        place[row.instance_id] = place.get(row.instance_id, 0) + 1
        params += [f.get_db_prep_save(getattr(row, f.attname), connection) for f in columns] + [place[row.instance_id]]
    first = "SELECT " + ", ".join(f"%s AS {name}" for name in names) + ", %s AS n"
    values = " UNION ALL ".join([first] + ["SELECT " + ", ".join(["%s"] * (len(names) + 1))] * (len(rows) - 1))
    instance = connection.ops.quote_name("instance_id")
    sequence = connection.ops.quote_name("sequence")
    last = f"(SELECT MAX(e.{sequence}) FROM {table} e WHERE e.{instance} = v.{instance})"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(names)}, {sequence}) "
            f"SELECT {', '.join('v.' + name for name in names)}, COALESCE({last}, 0) + v.n FROM ({values}) v",
            params,
        )


class _Batch:
    """The events of one transaction body not yet inserted."""

    def __init__(self) -> None:
        self.savepoints = tuple(connection.savepoint_ids)
        self.pending: list[models.InstanceEvent] = []

    def flush(self) -> None:
        rows, self.pending = self.pending, []
        if rows:
            _events_insert(rows)

    def guard(self, execute, sql, params, many, context):
        """Pending events go in before any statement that could read them and before a savepoint opens."""
        if self.pending and (sql.startswith("SAVEPOINT") or _TABLE in sql):
            self.flush()
        return execute(sql, params, many, context)


_TABLE = models.InstanceEvent._meta.db_table
_batch: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("weave_event_batch", default=None)


@contextlib.contextmanager
def events_batched() -> Iterator[None]:
    """Events written inside (in the open transaction) are inserted together when the block ends without error."""
    outer = _batch.get()
    if outer is not None:
        outer.flush()
    batch = _Batch()
    token = _batch.set(batch)
    try:
        with connection.execute_wrapper(batch.guard):
            yield
            batch.flush()
    finally:
        _batch.reset(token)


def event_append(
    *,
    instance_id: str,
    kind: str,
    subject_type: str,
    subject_id: str,
    step_key: str = "",
    before: str = "",
    after: str = "",
    detail: str = "",
    audit_id: str = "",
    operation_id: str = "",
    created_at=None,
) -> None:
    """Append one event to the instance's timeline, next in its sequence (the caller holds the instance lock)."""
    actor = _actor.get() or _ENGINE_ACTOR
    fields = {"created_at": created_at} if created_at is not None else {}
    event = models.InstanceEvent(
        instance_id=instance_id,
        kind=kind,
        subject_type=subject_type,
        subject_id=subject_id,
        step_key=step_key,
        before=before,
        after=after,
        detail=detail[:64],
        actor_kind=actor.kind,
        actor_id=actor.id,
        operation_id=operation_id or actor.operation_id,
        audit_id=audit_id,
        repair=actor.repair,
        **fields,
    )
    batch = _batch.get()
    # An event written inside a savepoint of the body goes in at once: the savepoint may be rolled back.
    if batch is not None and tuple(connection.savepoint_ids) == batch.savepoints:
        batch.pending.append(event)
    else:
        _events_insert([event])


def _row_saved(sender, instance, created: bool, raw: bool = False, **_) -> None:
    if raw:  # fixtures load rows as they were; they carry no timeline
        return
    row, subject = instance, SUBJECT_TYPES[sender]
    tracked = hasattr(row, "state_at_load")
    if created:
        before, after, kind = "", (row.state if tracked else ""), f"{subject}.created"
    elif tracked and "state" in row.__dict__ and row.state != row.state_at_load:
        before, after, kind = row.state_at_load or "", row.state, f"{subject}.state"
    else:
        return
    instance_id, step_key = _place(row)
    audit = subject == "audit"
    event_append(
        instance_id=instance_id,
        kind=kind,
        subject_type=subject,
        subject_id=row.pk,
        step_key=step_key,
        before=before,
        after=after,
        detail=_detail(row, subject),
        audit_id=row.pk if audit else "",
        operation_id=row.operation_id if audit else "",
        created_at=row.created_at if audit else None,
    )
    if tracked:
        row.state_at_load = row.state


def row_created(row) -> None:
    """The created event of a followed row written without ``save`` (``bulk_create``), sent as its save would."""
    post_save.send(sender=type(row), instance=row, created=True, update_fields=None, raw=False, using=row._state.db)


def events_follow() -> None:
    """Connect the writer to every followed model (once, from the app's ready())."""
    for model in SUBJECT_TYPES:
        post_save.connect(_row_saved, sender=model, dispatch_uid=f"weave.events.{model.__name__}")
