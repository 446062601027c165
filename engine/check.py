"""The invariant checker behind ``weave_check``: broken relations, quota drift, revision order, hung waits.

Reads only. Ids are random, so a join that follows them in a table's own order reads a page of
the other table per row once that table outgrows the buffer pool. Each check therefore lets SQL
find its *suspects* with scans and with joins that meet the other table in its key order: a row
set sorted on the joined column (a derived table whose ``ORDER BY … LIMIT`` keeps the order), then
lookups by ascending key, so that a pass reads each page once and the pages read grow with the
tables, not with rows times lookups. Suspects are a superset of
the violating rows, few on a sound history; the exact rule then runs on them alone, in the order
of the rows it walks, so the findings and their order are those of a plain walk of every row.
"""

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection
from django.db.models import Case, Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.db.models.functions import Coalesce

from core import clock
from engine.signaling import wait_winner
from history.models import (
    TERMINAL_TASK_STATES,
    Activation,
    Application,
    Attempt,
    AttemptState,
    Disposition,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceEvent,
    InstanceState,
    PollRound,
    Queue,
    ResultEvent,
    ResultKind,
    Signal,
    SignalState,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.ownership import task_named_back


@dataclass(frozen=True)
class Violation:
    code: str
    message: str
    ids: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.code}: {self.message} [{', '.join(self.ids)}]"


BATCH = 2000


def _batches(queryset: QuerySet, key: str, *fields: str) -> Iterator[list[tuple]]:
    """``(key, *fields)`` rows of ``queryset`` in keyset batches ordered by ``key``: memory stays bounded by
    the batch whatever the table size (``key`` unique in the rows, e.g. the primary key or a distinct value)."""
    last = None
    while True:
        page = queryset if last is None else queryset.filter(**{f"{key}__gt": last})
        rows = list(page.order_by(key).values_list(key, *fields)[:BATCH])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


# A LIMIT no table reaches: it keeps a derived table's ORDER BY (an unlimited one may be dropped), so
# the join after it reads the other table by ascending key.
_ALL = 2**62

# The tables the suspect queries name, as {placeholders}.
_TABLES = {
    "instance": WorkflowInstance,
    "gate": Gate,
    "step": Step,
    "activation": Activation,
    "task": Task,
    "attempt": Attempt,
    "result_event": ResultEvent,
    "inbox": InboxRecord,
    "poll_round": PollRound,
    "wait": Wait,
    "signal": Signal,
    "event": InstanceEvent,
}


def _sql(query: str) -> str:
    """``query`` with its ``{table}`` names and ``{all}`` filled in."""
    names = {name: connection.ops.quote_name(model._meta.db_table) for name, model in _TABLES.items()}
    return query.format(all=_ALL, **names)


def _suspects(*queries: str) -> list[str]:
    """The sorted, distinct first column of every row of these queries (see ``_sql``)."""
    found: set[str] = set()
    with connection.cursor() as cursor:
        for query in queries:
            cursor.execute(_sql(query), ())
            while rows := cursor.fetchmany(BATCH):
                found.update(row[0] for row in rows if row[0] is not None)
    return sorted(found)


def _walk(queryset: QuerySet, suspects: list[str], key: str, *fields: str) -> Iterator[list[tuple]]:
    """``(key, *fields)`` rows of ``queryset`` whose ``key`` is a suspect, in batches ordered by ``key``."""
    for start in range(0, len(suspects), BATCH):
        chunk = suspects[start : start + BATCH]
        rows = list(queryset.filter(**{f"{key}__in": chunk}).order_by(key).values_list(key, *fields))
        if rows:
            yield rows


def _by_id(model, ids, *fields: str) -> dict:
    """The rows of ``model`` with these ids: id → the tuple of ``fields`` (one field: its value)."""
    ids = {i for i in ids if i is not None}
    rows = model.objects.filter(pk__in=ids).values_list("pk", *fields) if ids else []
    return {row[0]: (row[1] if len(fields) == 1 else row[1:]) for row in rows}


def _ownership() -> Iterator[Violation]:
    steps = _suspects(
        # a step whose instance is missing (its (instance_id, key) index is already in instance order)
        "SELECT s.id FROM (SELECT id, instance_id FROM {step} ORDER BY instance_id LIMIT {all}) s"
        " LEFT JOIN {instance} i ON i.id = s.instance_id WHERE i.id IS NULL",
        # a current activation that is missing or another step's: looked for among the step's own in the
        # (step, sequence) index, which the step table's scan meets in its order
        # (the id is compared in a CASE: as a condition the optimizer would look it up by primary key)
        "SELECT s.id FROM {step} s WHERE s.current_activation_id IS NOT NULL AND 0 = COALESCE((SELECT"
        " MAX(CASE WHEN a.id = s.current_activation_id THEN 1 ELSE 0 END)"
        " FROM {activation} a WHERE a.step_id = s.id), 0)",
    )
    for batch in _walk(Step.objects.all(), steps, "id", "instance_id", "key", "current_activation_id"):
        instances = _by_id(WorkflowInstance, (row[1] for row in batch), "namespace_id")
        activation_step = _by_id(Activation, (row[3] for row in batch), "step_id")
        for step_id, instance_id, key, current in batch:
            if instance_id not in instances:
                yield Violation("step_orphan", f"step {key} names a missing instance", (step_id, instance_id))
            if current is not None and activation_step.get(current) != step_id:
                yield Violation(
                    "step_current_activation", "current activation is not one of the step's", (step_id, current)
                )
    rounds = _suspects(
        "SELECT r.id FROM (SELECT id, activation_id, task_id FROM {poll_round} ORDER BY task_id LIMIT {all}) r"
        " LEFT JOIN {task} t ON t.id = r.task_id WHERE t.id IS NULL OR t.source_activation_id <> r.activation_id"
    )
    for batch in _walk(PollRound.objects.all(), rounds, "id", "activation_id", "task_id"):
        task_source = _by_id(Task, (row[2] for row in batch), "source_activation_id")
        for _, activation_id, task_id in batch:
            if task_source.get(task_id) != activation_id:
                yield Violation("poll_round_task", "poll round's task is sourced by another activation", (task_id,))
    activations = _suspects(
        "SELECT a.id FROM (SELECT id, step_id, instance_id FROM {activation} ORDER BY step_id LIMIT {all}) a"
        " LEFT JOIN {step} s ON s.id = a.step_id WHERE s.id IS NULL OR s.instance_id <> a.instance_id",
        "SELECT a.id FROM (SELECT id, task_id FROM {activation} WHERE task_id IS NOT NULL"
        " ORDER BY task_id LIMIT {all}) a LEFT JOIN {task} t ON t.id = a.task_id"
        " WHERE t.id IS NULL OR t.source_activation_id <> a.id",
    )
    for batch in _walk(Activation.objects.all(), activations, "id", "step_id", "instance_id", "task_id"):
        steps = _by_id(Step, (row[1] for row in batch), "instance_id")
        task_source = _by_id(Task, (row[3] for row in batch), "source_activation_id")
        for activation_id, step_id, instance_id, task_id in batch:
            if steps.get(step_id) != instance_id:
                yield Violation("activation_step", "activation and its step disagree on the instance", (activation_id,))
            if task_id is not None and task_source.get(task_id) != activation_id:
                yield Violation(
                    "activation_task", "activation.task_id is not a task sourced by it", (activation_id, task_id)
                )
    queue_names = dict(Queue.objects.values_list("id", "name"))
    fields = ("namespace_id", "queue_id", "source_instance_id", "source_activation_id", "source_round")
    for batch in _walk(Task.objects.all(), _task_suspects(queue_names), "id", *fields):
        yield from _task_ownership(batch, queue_names)


# Every task with what its ownership rule reads, one hop at a time, each hop sorted on the key the next
# join looks up: its activation (and POLL round), the activation's step, the task's instance. The step's id in
# the last sort keeps it after the step join: sorted on the first table's column alone, MariaDB sorts that table
# before joining and looks the steps up in instance order, a random read each.
_TASK_PLACES = """
SELECT {select} FROM (
  SELECT x.id, x.namespace_id, x.queue_id, x.source_instance_id, x.owned, x.task_named, x.round_named,
         s.`key` AS step_key, s.kind AS step_kind
  FROM (
    SELECT t.id, t.namespace_id, t.queue_id, t.source_instance_id, a.step_id,
           CASE WHEN a.instance_id = t.source_instance_id THEN 1 ELSE 0 END AS owned,
           CASE WHEN a.task_id = t.id THEN 1 ELSE 0 END AS task_named,
           CASE WHEN EXISTS (
             SELECT 1 FROM {{poll_round}} r
             WHERE r.activation_id = t.source_activation_id AND r.`round` = t.source_round AND r.task_id = t.id
           ) THEN 1 ELSE 0 END AS round_named
    FROM (SELECT id, namespace_id, queue_id, source_instance_id, source_activation_id, source_round
          FROM {{task}} ORDER BY source_activation_id LIMIT {{all}}) t
    LEFT JOIN {{activation}} a ON a.id = t.source_activation_id
    ORDER BY a.step_id LIMIT {{all}}
  ) x LEFT JOIN {{step}} s ON s.id = x.step_id
  ORDER BY x.source_instance_id, s.id LIMIT {{all}}
) y LEFT JOIN {{instance}} i ON i.id = y.source_instance_id
{where}
"""
# Sourced, owned and named back; the queue is compared per (definition, step key, queue) in Python.
_TASK_PLACED = (
    "i.namespace_id = y.namespace_id AND y.owned = 1 AND (y.step_kind = 'TASK' AND y.task_named = 1"
    " OR y.step_kind = 'POLL' AND y.round_named = 1 OR y.step_kind NOT IN ('TASK', 'POLL'))"
)


def task_placements_sql() -> str:
    """Each task not placed as its activation, step and instance say, and each (definition, step key, queue) the
    others are placed on: one scan of the tasks, a row per distinct answer."""
    select = f"CASE WHEN {_TASK_PLACED} THEN NULL ELSE y.id END, i.definition_id, y.step_key, y.queue_id"
    return _sql(_TASK_PLACES.format(select=select, where="GROUP BY 1, 2, 3, 4"))


def _task_suspects(queue_names: dict) -> list[str]:
    """Tasks not placed as their activation, step and instance say, or on a queue their step does not name."""
    suspects, placements = set(), []
    with connection.cursor() as cursor:
        cursor.execute(task_placements_sql(), ())
        for task_id, definition_id, key, queue_id in cursor.fetchall():
            if task_id is None:
                placements.append((definition_id, key, queue_id))
            else:
                suspects.add(task_id)
    definitions = {d.id: d for d in WorkflowDefinition.objects.filter(pk__in={p[0] for p in placements})}
    misplaced = []
    for definition_id, key, queue_id in placements:
        spec = definitions[definition_id].step_spec(key) if definition_id in definitions else None
        if spec is None or queue_names.get(queue_id) != spec.get("queue"):
            misplaced.append((definition_id, key, queue_id))
    for start in range(0, len(misplaced), BATCH):
        chunk = misplaced[start : start + BATCH]
        match = " OR ".join(["(i.definition_id = %s AND y.step_key = %s AND y.queue_id = %s)"] * len(chunk))
        query = _TASK_PLACES.format(select="y.id", where=f"WHERE {_TASK_PLACED} AND ({match})")
        with connection.cursor() as cursor:
            cursor.execute(_sql(query), [value for row in chunk for value in row])
            suspects.update(row[0] for row in cursor.fetchall())
    return sorted(suspects)


_NOT_NAMED = {
    StepKind.TASK: ("task_activation", "TASK activation does not name this task"),
    StepKind.POLL: ("task_poll_round", "query task has no poll round under its activation"),
}


def _task_ownership(batch: list[tuple], queue_names: dict) -> Iterator[Violation]:
    instances = _by_id(WorkflowInstance, (row[3] for row in batch), "namespace_id", "definition_id")
    activations = _by_id(Activation, (row[4] for row in batch), "step_id", "instance_id", "task_id")
    steps = _by_id(Step, (a[0] for a in activations.values()), "key", "kind")
    definitions = {d.id: d for d in WorkflowDefinition.objects.filter(pk__in={i[1] for i in instances.values()})}
    rounds = set(
        PollRound.objects.filter(task_id__in=[row[0] for row in batch]).values_list("activation_id", "task_id", "round")
    )
    for task_id, namespace_id, queue_id, instance_id, activation_id, source_round in batch:
        instance = instances.get(instance_id)
        activation = activations.get(activation_id)
        if instance is None or instance[0] != namespace_id or activation is None or activation[1] != instance_id:
            yield Violation("task_source", "task, activation and instance disagree on ownership", (task_id,))
            continue
        key, kind = steps[activation[0]]
        definition = definitions.get(instance[1])
        spec = definition.step_spec(key) if definition else None
        if spec is None or queue_names.get(queue_id) != spec.get("queue"):
            yield Violation("task_queue", "task is not on its step's fixed queue", (task_id, queue_id or ""))
        named = (activation_id, task_id, source_round) in rounds
        if kind in _NOT_NAMED and not task_named_back(
            kind=kind, activation_task_id=activation[2], task_id=task_id, round_names_task=named
        ):
            code, message = _NOT_NAMED[kind]
            yield Violation(code, message, (task_id, activation_id) if kind == StepKind.TASK else (task_id,))


def _gaps(model, owner: str, number: str) -> Iterator[str]:
    """Owners whose rows are not numbered exactly 1..n (the numbers are unique per owner)."""
    rows = (
        model.objects.values(owner)
        .annotate(n=Count("id"), low=Min(number), high=Max(number))
        .filter(~Q(low=1) | ~Q(high=F("n")))
        .values_list(owner, flat=True)
    )
    return rows.iterator()


def _sequences() -> Iterator[Violation]:
    for step_id in _gaps(Activation, "step_id", "sequence"):
        yield Violation("activation_sequence_gap", "activation sequences are not 1..n", (step_id,))
    for task_id in _gaps(ResultEvent, "task_id", "seq"):
        yield Violation("result_sequence_gap", "result event sequences are not 1..n", (task_id,))


def _late_evidence() -> Iterator[Violation]:
    """A late event is a RESULT of one UNKNOWN attempt of its task, once, whose record is only LATE_RECORDED."""
    late = ResultEvent.objects.filter(late=True)
    for batch in _batches(late, "id", "task_id", "attempt_id", "kind", "outcome"):
        attempts = _by_id(Attempt, (row[2] for row in batch), "task_id", "state")
        records = {
            source_id: (state, disposition)
            for source_id, state, disposition in InboxRecord.objects.filter(
                source_kind=InboxSource.RESULT_EVENT, source_id__in=[row[0] for row in batch]
            ).values_list("source_id", "state", "disposition")
        }
        for event_id, task_id, attempt_id, kind, outcome in batch:
            if attempts.get(attempt_id) != (task_id, AttemptState.UNKNOWN):
                yield Violation("late_event_attempt", "late event names no UNKNOWN attempt of its task", (event_id,))
            if kind != ResultKind.RESULT or outcome not in ("SUCCEEDED", "FAILED"):
                yield Violation("late_event_kind", f"late event is {kind} {outcome}, not a completion", (event_id,))
            if records.get(event_id) != (InboxState.CONSUMED, Disposition.LATE_RECORDED):
                yield Violation("late_event_record", "late event's record is not consumed LATE_RECORDED", (event_id,))
    repeated = late.values("attempt_id").annotate(n=Count("id")).filter(n__gt=1)
    for attempt_id, count in repeated.values_list("attempt_id", "n").iterator():
        yield Violation("late_event_repeated", f"{count} late events of one attempt", (attempt_id or "",))


def _current_is_latest() -> Iterator[Violation]:
    latest = Activation.objects.filter(step_id=OuterRef("pk")).values("step_id").annotate(high=Max("sequence"))
    steps = Step.objects.exclude(current_activation_id=None).annotate(latest=Subquery(latest.values("high")))
    # Both sequences from one seek of the (step, sequence) index per step, in the step table's order (two
    # subqueries were two seeks: 9.0 s against 5.6 s at 1M); a current activation of another step has no
    # sequence there, so the comparison is NULL and its step a suspect too.
    suspects = _suspects(
        "SELECT s.id FROM {step} s WHERE s.current_activation_id IS NOT NULL AND 0 = COALESCE((SELECT"
        " MAX(a.`sequence`) = MAX(CASE WHEN a.id = s.current_activation_id THEN a.`sequence` END)"
        " FROM {activation} a WHERE a.step_id = s.id), 0)"
    )
    for batch in _walk(steps, suspects, "id", "current_activation__sequence", "latest"):
        for step_id, sequence, high in batch:
            if sequence != high:
                yield Violation(
                    "step_current_not_latest", f"current activation is #{sequence}, not the latest", (step_id,)
                )


def _waits() -> Iterator[Violation]:
    waits = _suspects(
        "SELECT w.id FROM (SELECT id, activation_id, step_id FROM {wait} ORDER BY activation_id LIMIT {all}) w"
        " LEFT JOIN {activation} a ON a.id = w.activation_id WHERE a.id IS NULL OR a.step_id <> w.step_id",
        "SELECT w.id FROM (SELECT id, winner_signal_id FROM {wait} WHERE winner_signal_id IS NOT NULL"
        " ORDER BY winner_signal_id LIMIT {all}) w LEFT JOIN {signal} g ON g.id = w.winner_signal_id"
        " WHERE g.id IS NULL OR g.consumed_wait_id IS NULL OR g.consumed_wait_id <> w.id",
    )
    for batch in _walk(Wait.objects.all(), waits, "id", "activation_id", "step_id", "winner_signal_id"):
        activation_step = _by_id(Activation, (row[1] for row in batch), "step_id")
        consumed = _by_id(Signal, (row[3] for row in batch), "consumed_wait_id")
        for wait_id, activation_id, step_id, winner in batch:
            if activation_step.get(activation_id) != step_id:
                yield Violation("wait_activation", "wait and its activation disagree on the step", (wait_id,))
            if winner is not None and consumed.get(winner) != wait_id:
                yield Violation("wait_winner", "winner signal was not consumed by this wait", (wait_id, winner))
    activations = _suspects(
        "SELECT a.id FROM (SELECT id, wait_id FROM {activation} WHERE wait_id IS NOT NULL"
        " ORDER BY wait_id LIMIT {all}) a LEFT JOIN {wait} w ON w.id = a.wait_id"
        " WHERE w.id IS NULL OR w.activation_id <> a.id"
    )
    for batch in _walk(Activation.objects.all(), activations, "id", "wait_id"):
        wait_activation = _by_id(Wait, (row[1] for row in batch), "activation_id")
        for activation_id, wait_id in batch:
            if wait_activation.get(wait_id) != activation_id:
                yield Violation(
                    "activation_wait", "activation.wait_id is not a wait of this activation", (activation_id,)
                )


def _untaken_signals() -> Iterator[Violation]:
    """No WAITING signal wait leaves behind a signal it would take now (``wait_winner``): a PENDING, unexpired
    signal of its step whose inbox record was consumed (buffered) and that matches it. The engine takes such
    a signal in the transaction that creates the wait or consumes the record; one left behind is an instance
    that hangs until the wait's deadline."""
    now = clock.now()
    buffered = Signal.objects.filter(
        workflow_id=OuterRef("instance_id"),
        target_step_key=OuterRef("step__key"),
        state=SignalState.PENDING,
        name=OuterRef("signal_name"),
        payload_version=OuterRef("payload_version"),
        correlation_key=OuterRef("correlation_key"),
        accepted_at__lte=OuterRef("deadline_at"),
        expires_at__gt=now,
    ).filter(
        Exists(
            InboxRecord.objects.filter(
                source_kind=InboxSource.SIGNAL, source_id=OuterRef("id"), state=InboxState.CONSUMED
            )
        )
    )
    suspects = Wait.objects.filter(state=WaitState.WAITING, kind__in=(WaitKind.SIGNAL, WaitKind.POLL_FINAL_SIGNAL))
    for batch in _batches(suspects.filter(Exists(buffered)), "id"):
        waits = Wait.objects.in_bulk([row[0] for row in batch])
        activations = Activation.objects.in_bulk({w.activation_id for w in waits.values()})
        steps = Step.objects.in_bulk({w.step_id for w in waits.values()})
        untaken = {}
        for wait_id, wait in sorted(waits.items()):
            activation, step = activations.get(wait.activation_id), steps.get(wait.step_id)
            winner = wait_winner(wait=wait, activation=activation, step=step, now=now) if activation and step else None
            if winner is not None:
                untaken[wait_id] = winner.id
        # Read again after the signals: a wait still WAITING was WAITING when they were read (none returns to it).
        still = set(Wait.objects.filter(pk__in=untaken, state=WaitState.WAITING).values_list("id", flat=True))
        for wait_id, signal_id in untaken.items():
            if wait_id in still:
                message = "WAITING wait left a buffered signal it matches untaken: its instance hangs"
                yield Violation("wait_signal_untaken", message, (wait_id, signal_id))


def _retry_chain() -> Iterator[Violation]:
    retried = Task.objects.exclude(retry_of_id=None).values("retry_of_id")
    for task_id, count in retried.annotate(n=Count("id")).filter(n__gt=1).values_list("retry_of_id", "n").iterator():
        yield Violation("retry_of_successors", f"{count} tasks retry the same task", (task_id,))
    missing = _suspects(
        "SELECT r.retry_of_id FROM (SELECT retry_of_id FROM {task} WHERE retry_of_id IS NOT NULL"
        " ORDER BY retry_of_id LIMIT {all}) r LEFT JOIN {task} t ON t.id = r.retry_of_id WHERE t.id IS NULL"
    )
    for task_id in missing:
        yield Violation("retry_of_missing", "retry_of names a missing task", (task_id,))


def _quota() -> Iterator[Violation]:
    # One scan counts the tasks per charge and state; the tasks themselves are read only for a bad count.
    groups = Task.objects.values_list("application_id", "queue_id", "permit_held", "state").annotate(n=Count("id"))
    held_by_app: dict[str, int] = defaultdict(int)
    held_by_queue: dict[str, int] = defaultdict(int)
    terminal_held = live_free = False
    for application_id, queue_id, permit_held, state, count in groups.order_by():
        terminal = state in TERMINAL_TASK_STATES
        if permit_held:
            held_by_app[application_id] += count
            held_by_queue[queue_id] += count
        terminal_held |= permit_held and terminal
        live_free |= not permit_held and not terminal
    for model, held, label in ((Application, held_by_app, "application"), (Queue, held_by_queue, "queue")):
        for row_id, active in model.objects.values_list("id", "active_tasks").iterator():
            if active != held.get(row_id, 0):
                yield Violation(
                    "quota_drift",
                    f"{label} counts {active} active tasks, {held.get(row_id, 0)} permits held",
                    (row_id,),
                )
    terminal = Task.objects.filter(permit_held=True, state__in=TERMINAL_TASK_STATES)
    for task_id, state in terminal.values_list("id", "state").iterator() if terminal_held else ():
        yield Violation("terminal_task_holds_permit", f"{state} task still holds a permit", (task_id,))
    live = Task.objects.filter(permit_held=False).exclude(state__in=TERMINAL_TASK_STATES)
    for task_id in live.values_list("id", flat=True).iterator() if live_free else ():
        yield Violation("live_task_without_permit", "a task that is not terminal holds no permit", (task_id,))


def _attempts() -> Iterator[Violation]:
    suspects = _suspects(
        # the count from the (task, number) index, looked up in task order
        "SELECT t.id FROM {task} t WHERE t.attempt_count <> (SELECT COUNT(*) FROM {attempt} a WHERE a.task_id = t.id)",
        # a RUNNING attempt belongs to a LEASED task, one each: only tasks in flight can break it
        f"SELECT id FROM {{task}} WHERE state = '{TaskState.LEASED}'",
        f"SELECT task_id FROM {{attempt}} WHERE state = '{AttemptState.RUNNING}'",
    )
    for batch in _walk(Task.objects.all(), suspects, "id", "attempt_count", "state"):
        attempts = Attempt.objects.filter(task_id__in=[row[0] for row in batch]).values("task_id")
        counts = dict(attempts.annotate(n=Count("id")).values_list("task_id", "n"))
        running = dict(attempts.filter(state=AttemptState.RUNNING).annotate(n=Count("id")).values_list("task_id", "n"))
        for task_id, attempt_count, state in batch:
            if counts.get(task_id, 0) != attempt_count:
                yield Violation(
                    "attempt_count", f"attempt_count {attempt_count}, {counts.get(task_id, 0)} rows", (task_id,)
                )
            if running.get(task_id, 0) != (1 if state == TaskState.LEASED else 0):
                yield Violation(
                    "attempt_running", f"{state} task has {running.get(task_id, 0)} RUNNING attempts", (task_id,)
                )


def _revisions_and_gates() -> Iterator[Violation]:
    # Each child table (as named in _TABLES) and its column naming the instance.
    children = (
        ("step", "instance_id"),
        ("activation", "instance_id"),
        ("task", "source_instance_id"),
        ("signal", "workflow_id"),
    )
    # A child newer than its instance: every child table at once, sorted on the instance, so that the
    # instances are read once.
    union = " UNION ALL ".join(f"SELECT {field} AS instance_id, revision FROM {{{name}}}" for name, field in children)
    behind = (
        f"SELECT c.instance_id FROM (SELECT * FROM ({union}) u ORDER BY instance_id LIMIT {{all}}) c"
        " LEFT JOIN {instance} i ON i.id = c.instance_id WHERE i.id IS NULL OR i.revision < c.revision"
    )
    gates = (
        "SELECT i.id FROM {instance} i LEFT JOIN {gate} g ON g.instance_id = i.id WHERE g.instance_id IS NULL"
        " OR i.revision < g.revision"
        f" OR g.`open` <> CASE WHEN i.state = '{InstanceState.RUNNING}' AND i.paused = 0 THEN 1 ELSE 0 END"
    )
    suspects = _suspects(behind, gates)
    for batch in _walk(WorkflowInstance.objects.all(), suspects, "id", "revision", "state", "paused"):
        ids = [row[0] for row in batch]
        newest: dict[str, int] = defaultdict(int)
        for name, field in children:
            rows = _TABLES[name].objects.filter(**{f"{field}__in": ids}).values(field).annotate(r=Max("revision"))
            for instance_id, revision in rows.values_list(field, "r"):
                newest[instance_id] = max(newest[instance_id], revision)
        gates = {
            row[0]: row[1:] for row in Gate.objects.filter(pk__in=ids).values_list("instance_id", "open", "revision")
        }
        for instance_id, revision, state, paused in batch:
            gate = gates.get(instance_id)
            child = max(newest.get(instance_id, 0), gate[1] if gate else 0)
            if revision < child:
                yield Violation(
                    "revision_behind_children", f"instance revision {revision} < child revision {child}", (instance_id,)
                )
            if gate is None:
                yield Violation("gate_missing", "instance has no gate", (instance_id,))
            elif gate[0] != (state == InstanceState.RUNNING and not paused):
                yield Violation(
                    "gate_state", f"gate open={gate[0]} for a {state} paused={paused} instance", (instance_id,)
                )


def _review_causes() -> Iterator[Violation]:
    """In review ⇔ a cause and a time are recorded; outside review, they, the step and the failure signature are
    blank (in review, a signature is recorded unless a release before signatures put it there); the step, when
    named, is one of the instance's."""
    in_review = Q(state=InstanceState.NEEDS_REVIEW)
    unrecorded = WorkflowInstance.objects.filter(in_review & (Q(review_cause="") | Q(review_since=None)))
    for instance_id in unrecorded.values_list("id", flat=True).iterator():
        yield Violation("review_cause_missing", "instance in review records no cause or no time", (instance_id,))
    left = WorkflowInstance.objects.filter(
        ~in_review
        & (
            ~Q(review_cause="")
            | ~Q(review_step_key="")
            | Q(review_since__isnull=False)
            | Q(failure_signature__isnull=False)
        )
    )
    for instance_id, state in left.values_list("id", "state").iterator():
        yield Violation("review_cause_stale", f"{state} instance still records a review cause", (instance_id,))
    named = WorkflowInstance.objects.exclude(review_step_key="")
    unknown = named.filter(~Exists(Step.objects.filter(instance_id=OuterRef("pk"), key=OuterRef("review_step_key"))))
    for instance_id, key in unknown.values_list("id", "review_step_key").iterator():
        yield Violation("review_step_unknown", f"review names step {key}, not a step of the instance", (instance_id,))


def _inbox() -> Iterator[Violation]:
    result_records = InboxRecord.objects.filter(source_kind=InboxSource.RESULT_EVENT)
    recorded = f"r.source_kind = '{InboxSource.RESULT_EVENT}'"
    events = _suspects(
        f"SELECT e.id FROM (SELECT id FROM {{result_event}} ORDER BY id LIMIT {{all}}) e"
        f" WHERE (SELECT COUNT(*) FROM {{inbox}} r WHERE {recorded} AND r.source_id = e.id) <> 1"
    )
    for batch in _walk(ResultEvent.objects.all(), events, "id"):
        records = result_records.filter(source_id__in=[row[0] for row in batch]).values("source_id")
        counts = dict(records.annotate(n=Count("id")).values_list("source_id", "n"))
        for (event_id,) in batch:
            if counts.get(event_id, 0) != 1:
                yield Violation(
                    "result_event_record", f"result event has {counts.get(event_id, 0)} inbox records", (event_id,)
                )
    # The (source_kind, source_id) index walks the records in event order.
    missing = _suspects(
        f"SELECT r.source_id FROM {{inbox}} r LEFT JOIN {{result_event}} e ON e.id = r.source_id WHERE {recorded}"
        " AND e.id IS NULL"
    )
    for event_id in missing:
        yield Violation("record_without_event", "inbox record names a missing result event", (event_id,))
    unrecorded = _suspects(
        "SELECT g.id FROM (SELECT id FROM {signal} ORDER BY id LIMIT {all}) g"
        f" LEFT JOIN {{inbox}} r ON r.source_kind = '{InboxSource.SIGNAL}' AND r.source_id = g.id WHERE r.id IS NULL"
    )
    for signal_id in unrecorded:
        yield Violation("signal_without_record", "accepted signal has no inbox record", (signal_id,))
    quarantined = InboxRecord.objects.filter(state=InboxState.QUARANTINED)
    for record_id, instance_id, reason in quarantined.values_list("id", "instance_id", "quarantine_reason").iterator():
        yield Violation("quarantined_record", f"corruption: {reason}", (record_id, instance_id))


# Each followed row with a state, the column (path) naming its instance, and its rows as (instance_id, id,
# state); a row without events must hold the state ``initial`` says (blank: none may).
_FOLLOWED = (
    (WorkflowInstance, "id", "SELECT id AS instance_id, id, state, '' AS initial FROM {instance}"),
    (
        Step,
        "instance_id",
        f"SELECT instance_id, id, state, CASE WHEN state = '{StepState.PENDING}' THEN state ELSE '' END FROM {{step}}",
    ),
    (Activation, "instance_id", "SELECT instance_id, id, state, '' FROM {activation}"),
    (Task, "source_instance_id", "SELECT source_instance_id, id, state, '' FROM {task}"),
    (
        Attempt,
        "task__source_instance_id",
        "SELECT t.source_instance_id, a.id, a.state, ''"
        " FROM (SELECT id, task_id, state FROM {attempt} ORDER BY task_id LIMIT {all}) a"
        " LEFT JOIN {task} t ON t.id = a.task_id",
    ),
    (Wait, "instance_id", "SELECT instance_id, id, state, '' FROM {wait}"),
    (Signal, "workflow_id", "SELECT workflow_id, id, state, '' FROM {signal}"),
    (InboxRecord, "instance_id", "SELECT instance_id, id, state, '' FROM {inbox}"),
)
_LATEST_EVENT = (
    "SELECT e.`after` FROM {event} e WHERE e.instance_id = x.instance_id AND e.subject_id = x.id"
    " AND (e.kind LIKE '%%.state' OR e.kind LIKE '%%.created') ORDER BY e.`sequence` DESC LIMIT 1"
)


def _timeline() -> Iterator[Violation]:
    """Sequences are 1..n per instance, and the latest created/state event of each followed row names the
    state the row holds. A row without an event must be in its initial state (a step PENDING), unless its
    instance's timeline starts with a reconstructed prefix written before the timeline existed."""
    for instance_id in _gaps(InstanceEvent, "instance_id", "sequence"):
        yield Violation("event_sequence_gap", "event sequences are not 1..n", (instance_id,))
    # Suspects: a row whose latest event does not name its state, or that has none and is not in its initial
    # state. Every followed row at once, sorted by instance: the events' index is read once, in its order.
    union = " UNION ALL ".join(
        f"SELECT {n} AS model, u{n}.* FROM ({sql}) u{n}" for n, (_, _, sql) in enumerate(_FOLLOWED)
    )
    query = (
        f"SELECT x.model, x.id FROM (SELECT * FROM ({union}) u ORDER BY instance_id LIMIT {{all}}) x"
        f" WHERE COALESCE(({_LATEST_EVENT}), x.initial) <> x.state"
    )
    suspects: dict[int, list[str]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(_sql(query), ())
        for n, row_id in cursor.fetchall():
            suspects[n].append(row_id)
    for n, (model, instance, _) in enumerate(_FOLLOWED):
        events = InstanceEvent.objects.filter(instance_id=OuterRef(instance), subject_id=OuterRef("pk"))
        latest = events.filter(kind__endswith=".state") | events.filter(kind__endswith=".created")
        rows = model.objects.annotate(
            latest=Subquery(latest.order_by("-sequence").values("after")[:1]),
            prefix=Exists(InstanceEvent.objects.filter(instance_id=OuterRef(instance), reconstructed=True)),
        ).filter(Q(latest__isnull=True, prefix=False) | ~Q(latest=F("state")))
        if model is Step:
            rows = rows.exclude(latest__isnull=True, state=StepState.PENDING)
        for batch in _walk(rows, sorted(suspects[n]), "pk", "state", "latest"):
            yield from _timeline_findings(model, batch)


def _timeline_findings(model, batch: list[tuple]) -> Iterator[Violation]:
    for row_id, state, after in batch:
        if after is None:
            yield Violation("event_missing", f"{model.__name__} {state} has no created event", (row_id,))
        else:
            message = f"{model.__name__} is {state}, its latest event says {after}"
            yield Violation("event_state_mismatch", message, (row_id,))


def _step_counters() -> Iterator[Violation]:
    """Each step's counters against its rows: a correlated count per step of its activations and a correlated
    sum per step of the attempts of its earlier activations' tasks (TASK steps; 0 for the others), each a seek
    in the scan's order, both in one scan of the steps (two scans: 17–20 s at 1M, one: 14–16 s). (A join grouped
    by step sorted every step in a temporary table: 13 s of 16 at 1M.)"""
    activations = Activation.objects.filter(step_id=OuterRef("pk")).values("step_id").annotate(n=Count("*"))
    earlier = (
        Task.objects.filter(source_activation__step_id=OuterRef("pk"))
        .exclude(source_activation_id=OuterRef("current_activation_id"))
        .values("source_activation__step_id")
        .annotate(n=Sum("attempt_count"))
        .values("n")
    )
    expected = Case(When(kind=StepKind.TASK, then=Coalesce(Subquery(earlier), 0)), default=0)
    drifted = Step.objects.annotate(rows=Coalesce(Subquery(activations.values("n")), 0), expected=expected).filter(
        ~Q(activation_count=F("rows")) | ~Q(attempts_before=F("expected"))
    )
    fields = ("id", "activation_count", "rows", "attempts_before", "expected")
    attempts_drift = []
    for step_id, counter, rows, before, attempts in drifted.values_list(*fields).iterator():
        if counter != rows:
            yield Violation("step_counter_drift", f"activation_count {counter}, {rows} activations", (step_id,))
        if before != attempts:
            message = f"attempts_before {before}, the earlier activations' tasks ran {attempts}"
            attempts_drift.append(Violation("step_counter_drift", message, (step_id,)))
    # after every activation count, as a check of each counter in turn reports them
    yield from attempts_drift


CHECKS = (
    _ownership,
    _sequences,
    _late_evidence,
    _current_is_latest,
    _waits,
    _untaken_signals,
    _retry_chain,
    _quota,
    _attempts,
    _revisions_and_gates,
    _review_causes,
    _inbox,
    _timeline,
    _step_counters,
)


# The tables each check reads, for an estimate of how far a run has come (engine/check_run.py).
READS = {
    _ownership: (Step, WorkflowInstance, Activation, PollRound, Task),
    _sequences: (Activation, ResultEvent),
    _late_evidence: (ResultEvent,),
    _current_is_latest: (Step, Activation),
    _waits: (Wait, Activation, Signal),
    _untaken_signals: (Signal, Wait),
    _retry_chain: (Task,),
    _quota: (Task,),
    _attempts: (Task, Attempt),
    _revisions_and_gates: (WorkflowInstance, Gate, Step, Activation, Task, Signal),
    _review_causes: (WorkflowInstance, Step),
    _inbox: (ResultEvent, InboxRecord, Signal),
    _timeline: (InstanceEvent, WorkflowInstance, Step, Activation, Task, Attempt, Wait, Signal, InboxRecord),
    _step_counters: (Step, Activation, Task),
}


def invariants_stream() -> Iterator[Violation]:
    """Every violation of the engine's invariants, with the ids involved, as each check finds it."""
    for check in CHECKS:
        yield from check()


def invariants_check() -> list[Violation]:
    """Every violation of the engine's invariants, collected in a list."""
    return list(invariants_stream())
