"""Build a large, consistent history fast, with multi-row inserts (MariaDB/MySQL).

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench python -m bench seed [--scale 1.0]

At scale 1.0: one instance with 1 000 000 signals (each with its acceptance audit and inbox
record), one TASK step with 100 000 activations, one POLL activation with 100 000 rounds, and
1 000 000 one-task instances across 4 namespaces, 5 % of them in review (``seed_instances``: generated
by the server, their indexes built after their rows, 7 minutes on a 128 MiB pool). Every row respects the
invariants `manage.py weave_check` verifies (ownership both ways, gap-free sequences, one retry
successor, quota counters = permits held, revisions, inbox ↔ result events). Writes the ids the
other benchmarks read to var/bench-seed-<database>.json.
"""

import argparse
import datetime as dt
import json
import sys
import time
from contextlib import contextmanager

from django.db import connection, transaction
from django.db.models import Count, F, JSONField, OuterRef, Subquery
from django.db.models.functions import Coalesce, Greatest

from bench.database import buffer_pool_mib, database_ready, seed_summary_path
from core.ids import ROOT_STEP_KEY, new_id
from history import models as m
from history.events import SUBJECT_TYPES
from history.tenancy import namespace_ensure

BATCH = 5000
ACTOR = "b" * 32
# The attempt budget of the activations part's step: a retry chain of up to a million one-attempt tasks.
BUDGET = 10**6


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self.started = label, total, 0, time.monotonic()

    def add(self, count: int) -> None:
        self.done += count
        filled = int(30 * self.done / max(self.total, 1))
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        bar = "#" * filled + "." * (30 - filled)
        sys.stderr.write(f"\r{self.label:<26} [{bar}] {self.done:>9}/{self.total} {rate:>8.0f}/s")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class Table:
    """Rows of one model as tuples, written with one multi-row INSERT per batch."""

    def __init__(self, model) -> None:
        self.model = model
        self.fields = [field for field in model._meta.concrete_fields if not field.generated]
        self.names = [f.attname for f in self.fields]
        self.defaults = {f.attname: f.get_default() for f in self.fields}
        self.json = {f.attname for f in self.fields if isinstance(f, JSONField)}
        columns = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
        marks = ", ".join(["%s"] * len(self.fields))
        self.sql = f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) VALUES ({marks})"
        self.rows: list[tuple] = []

    def add(self, **values) -> str:
        row = {**self.defaults, "id": new_id(), **values} if "id" in self.defaults else {**self.defaults, **values}
        self.rows.append(tuple(self._db(name, row[name]) for name in self.names))
        if self.model in SUBJECT_TYPES and row.get("state"):
            event_add(self.model, row)
        return row.get("id")

    def _db(self, name, value):
        if name in self.json:
            return None if value is None else json.dumps(value)
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value

    def flush(self) -> None:
        with connection.cursor() as cursor:
            for start in range(0, len(self.rows), BATCH):
                cursor.executemany(self.sql, self.rows[start : start + BATCH])
        self.rows.clear()


TABLES = {
    model: None
    for model in (
        m.WorkflowInstance,
        m.Gate,
        m.Step,
        m.Activation,
        m.Task,
        m.Attempt,
        m.ResultEvent,
        m.InboxRecord,
        m.PollRound,
        m.Signal,
        m.SignalOperation,
        m.InstanceEvent,  # last: its rows name the instances above
    )
}


_sequences: dict[str, int] = {}
_task_instances: dict[str, str] = {}


def event_add(model, row: dict) -> None:
    """The row's created event in the state it is seeded with: its instance's timeline, as weave_check reads it."""
    if model is m.Task:
        _task_instances[row["id"]] = row["source_instance_id"]
    if model is m.WorkflowInstance:
        instance_id = row["id"]
    elif model is m.Attempt:
        instance_id = _task_instances[row["task_id"]]
    else:
        instance_id = row.get("instance_id") or row.get("source_instance_id") or row.get("workflow_id")
    if instance_id is None:
        return
    _sequences[instance_id] = _sequences.get(instance_id, 0) + 1
    subject = SUBJECT_TYPES[model]
    table(m.InstanceEvent).add(
        instance_id=instance_id,
        sequence=_sequences[instance_id],
        kind=f"{subject}.created",
        subject_type=subject,
        subject_id=row["id"],
        step_key=row["key"] if model is m.Step else "",
        after=row["state"],
        actor_kind="engine",
        created_at=row.get("created_at") or row.get("started_at") or row.get("accepted_at"),
    )


def table(model) -> Table:
    if TABLES[model] is None:
        TABLES[model] = Table(model)
    return TABLES[model]


def flush_all() -> None:
    with transaction.atomic():
        for t in TABLES.values():
            if t is not None and t.rows:
                t.flush()


DEFINITION_SPEC = {
    "steps": [
        {"key": "work", "kind": "TASK", "after": [], "handler": "demo.echo", "queue": "bench", "max_attempts": BUDGET},
        {
            "key": "poll",
            "kind": "POLL",
            "after": [],
            "handler": "demo.poll_pending",
            "queue": "bench",
            "max_rounds": 10**6,
            "attempts_per_round": 1,
            "interval_seconds": 1,
        },
        {"key": "approve", "kind": "SIGNAL", "after": [], "signal": {"name": "approved", "payload_version": "1"}},
    ]
}


def add_instance(tenant, when, *, revision, state=m.InstanceState.NEEDS_REVIEW, **extra) -> str:
    """An instance with its gate and root step; one in review since ``when`` (give its cause and step)."""
    ns, _, _, definition = tenant
    if state == m.InstanceState.NEEDS_REVIEW:
        extra = {"review_since": when} | extra
    instance_id = table(m.WorkflowInstance).add(
        namespace_id=ns.id,
        definition_id=definition.id,
        state=state,
        input="{}",
        revision=revision,
        created_at=when,
        updated_at=when,
        **extra,
    )
    table(m.Gate).add(instance_id=instance_id, open=False, revision=2)
    finished = state == m.InstanceState.SUCCEEDED
    table(m.Step).add(
        instance_id=instance_id,
        key=ROOT_STEP_KEY,
        kind=m.StepKind.ROOT,
        state=m.StepState.SUCCEEDED if finished else m.StepState.ACTIVE,
        created_at=when,
        updated_at=when,
    )
    return instance_id


def add_task(tenant, instance_id, activation_id, when, *, outcome, result, max_attempts=1, **extra) -> str:
    """A finished task with its one attempt, its result event and the consumed inbox record."""
    ns, app, queue, _ = tenant
    task_id = table(m.Task).add(
        namespace_id=ns.id,
        application_id=app.id,
        queue_id=queue.id,
        handler="demo.echo",
        input="{}",
        state=outcome,
        revision=3,
        attempt_count=1,
        max_attempts=max_attempts,
        source_instance_id=instance_id,
        source_activation_id=activation_id,
        outcome=outcome,
        result=result,
        permit_held=False,
        execution_settled=True,
        created_at=when,
        updated_at=when,
        **extra,
    )
    table(m.Attempt).add(
        task_id=task_id, number=1, worker="bench", state=outcome, started_at=when, finished_at=when, result=result
    )
    event_id = table(m.ResultEvent).add(
        task_id=task_id,
        seq=1,
        kind=m.ResultKind.RESULT,
        outcome=outcome,
        result=result,
        task_revision=3,
        created_at=when,
    )
    table(m.InboxRecord).add(
        instance_id=instance_id,
        source_kind=m.InboxSource.RESULT_EVENT,
        source_id=event_id,
        task_id=task_id,
        activation_id=activation_id,
        state=m.InboxState.CONSUMED,
        disposition=m.Disposition.APPLIED,
        created_at=when,
        consumed_at=when,
    )
    return task_id


def batched(label: str, count: int, build) -> None:
    """Call build(index) for every row, flushing every BATCH rows in one transaction."""
    progress = Progress(label, count)
    for index in range(count):
        build(index)
        if (index + 1) % BATCH == 0 or index + 1 == count:
            flush_all()
            progress.add((index % BATCH) + 1)


def at(start: dt.datetime, index: int) -> dt.datetime:
    return start + dt.timedelta(milliseconds=index)


def seed_signals(tenant, count: int, start: dt.datetime) -> str:
    ns = tenant[0]
    instance_id = add_instance(
        tenant,
        start,
        revision=count + 10,
        review_cause=m.ReviewCause.SIGNAL_CONTRACT_VIOLATION,
        review_step_key="approve",
    )
    table(m.Step).add(instance_id=instance_id, key="approve", kind=m.StepKind.SIGNAL, created_at=start)
    flush_all()

    def build(index: int) -> None:
        when = at(start, index)
        signal_id = table(m.Signal).add(
            namespace_id=ns.id,
            workflow_id=instance_id,
            name="approved",
            payload_version="1",
            payload="{}",
            correlation_key="bench",
            target_step_key="approve",
            target_activation_sequence=1,
            state=m.SignalState.EXPIRED,
            disposition=m.Disposition.EXPIRED,
            accepted_at=when,
            expires_at=when + dt.timedelta(hours=1),
            actor_id=ACTOR,
        )
        table(m.SignalOperation).add(
            namespace_id=ns.id,
            workflow_id=instance_id,
            signal_id=signal_id,
            operation_id=new_id(),
            actor_id=ACTOR,
            action="workflow.signal",
            reason="benchmark",
            before=None,
            after={"signal_id": signal_id, "state": "PENDING", "name": "approved"},
            created_at=when,
        )
        table(m.InboxRecord).add(
            instance_id=instance_id,
            source_kind=m.InboxSource.SIGNAL,
            source_id=signal_id,
            signal_id=signal_id,
            state=m.InboxState.CONSUMED,
            disposition=m.Disposition.BUFFERED,
            created_at=when,
            consumed_at=when,
        )

    batched("signals + audits + inbox", count, build)
    return instance_id


def seed_activations(tenant, count: int, start: dt.datetime) -> dict:
    instance_id = add_instance(
        tenant, start, revision=count + 10, review_cause=m.ReviewCause.TASK_BUDGET_EXHAUSTED, review_step_key="work"
    )
    step_id = new_id()
    chain = {"previous": None, "last": None}

    def build(index: int) -> None:
        when = at(start, index)
        activation_id = new_id()
        task_id = add_task(
            tenant,
            instance_id,
            activation_id,
            when,
            outcome="FAILED",
            result='{"error":"bench"}',
            retry_of_id=chain["previous"],
            # What the engine writes: each retry gets what its predecessor's one attempt left of the budget.
            max_attempts=BUDGET - index,
        )
        table(m.Activation).add(
            id=activation_id,
            step_id=step_id,
            instance_id=instance_id,
            sequence=index + 1,
            state=m.ActivationState.FAILED,
            revision=3,
            task_id=task_id,
            input="{}",
            created_at=when,
            updated_at=when,
            completed_at=when,
        )
        chain["previous"], chain["last"] = task_id, activation_id

    batched("activations + tasks", count, build)
    table(m.Step).add(
        id=step_id,
        instance_id=instance_id,
        key="work",
        kind=m.StepKind.TASK,
        state=m.StepState.FAILED,
        current_activation_id=chain["last"],
        revision=count + 1,
        activation_count=count,
        attempts_before=count - 1,  # one attempt for each task before the current activation's
        created_at=start,
        updated_at=start,
    )
    flush_all()
    return {"instance_id": instance_id, "step_key": "work", "step_id": step_id}


def seed_rounds(tenant, count: int, start: dt.datetime) -> dict:
    instance_id = add_instance(
        tenant, start, revision=count + 10, review_cause=m.ReviewCause.POLL_REQUEST_FAILED, review_step_key="poll"
    )
    step_id, activation_id = new_id(), new_id()
    last = {}

    def build(index: int) -> None:
        when = at(start, index)
        task_id = add_task(
            tenant,
            instance_id,
            activation_id,
            when,
            outcome="SUCCEEDED",
            result='{"status":"PENDING"}',
            source_round=index + 1,
        )
        table(m.PollRound).add(
            activation_id=activation_id, instance_id=instance_id, round=index + 1, task_id=task_id, created_at=when
        )
        last["task"] = task_id

    batched("poll rounds + tasks", count, build)
    table(m.Activation).add(
        id=activation_id,
        step_id=step_id,
        instance_id=instance_id,
        sequence=1,
        state=m.ActivationState.NEEDS_REVIEW,
        revision=count + 1,
        input="{}",
        created_at=start,
        updated_at=start,
        first_round=1,
        first_round_attempts_used=0,
        used_rounds=count,
        max_rounds=10**6,
        attempts_per_round=1,
        interval_seconds=1,
        poll_deadline_at=start + dt.timedelta(days=30),
        last_task_id=last.get("task"),
        last_round_classification="PENDING",
    )
    table(m.Step).add(
        id=step_id,
        instance_id=instance_id,
        key="poll",
        kind=m.StepKind.POLL,
        state=m.StepState.NEEDS_REVIEW,
        current_activation_id=activation_id,
        revision=2,
        activation_count=1,
        created_at=start,
        updated_at=start,
    )
    flush_all()
    return {"instance_id": instance_id, "step_key": "poll", "activation_id": activation_id}


def _secondary_indexes(model) -> dict[str, str]:
    """The model's indexes other than its primary key: name → its ``ADD`` clause of ``ALTER TABLE``, exactly as
    the server holds it (columns, prefix lengths, directions, uniqueness)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT index_name, non_unique, column_name, sub_part, collation FROM information_schema.statistics"
            " WHERE table_schema = DATABASE() AND table_name = %s AND index_name <> 'PRIMARY'"
            " ORDER BY index_name, seq_in_index",
            [model._meta.db_table],
        )
        rows = cursor.fetchall()
    quote = connection.ops.quote_name
    indexes: dict[str, tuple[int, list[str]]] = {}
    for name, non_unique, column, sub_part, collation in rows:
        part = quote(column) + (f"({sub_part})" if sub_part else "") + (" DESC" if collation == "D" else "")
        indexes.setdefault(name, (non_unique, []))[1].append(part)
    return {
        name: f"ADD {'' if non_unique else 'UNIQUE '}INDEX {quote(name)} ({', '.join(parts)})"
        for name, (non_unique, parts) in indexes.items()
    }


@contextmanager
def indexes_deferred(models):
    """Drop the secondary indexes of ``models`` for the block, then build each table's again in one ALTER.

    Rows inserted in primary-key order then fill the clustered index in one sweep, and each secondary index
    is built by a merge sort instead of row by row on random pages: on a table larger than the buffer pool
    the difference is reading each page once against reading one per row. The indexes come back as the
    server held them, also when the block fails.
    """
    quote = connection.ops.quote_name
    held = {model: _secondary_indexes(model) for model in dict.fromkeys(models)}
    with connection.cursor() as cursor:
        for model, indexes in held.items():
            if indexes:
                drops = ", ".join(f"DROP INDEX {quote(name)}" for name in indexes)
                cursor.execute(f"ALTER TABLE {quote(model._meta.db_table)} {drops}")
    try:
        yield
    finally:
        progress = Progress("indexes (tables)", len(held))
        with connection.cursor() as cursor:
            for model, indexes in held.items():
                if indexes:
                    cursor.execute(f"ALTER TABLE {quote(model._meta.db_table)} {', '.join(indexes.values())}")
                progress.add(1)


def insert_select(model, count: int, exprs: dict[str, str]) -> None:
    """``INSERT … SELECT`` of ``count`` rows generated by MariaDB's SEQUENCE engine (column ``seq``), in
    primary-key order (see ``indexes_deferred``).

    ``exprs`` maps a field to an SQL expression of ``seq``; other fields take their defaults.
    """
    t = Table(model)
    values, params = [], []
    for name in t.names:
        if name in exprs:
            values.append(exprs[name])
        else:
            values.append("%s")
            params.append(t._db(name, t.defaults[name]))
    columns = t.sql[t.sql.index("(") : t.sql.index(")") + 1]
    table_name = connection.ops.quote_name(model._meta.db_table)
    order = exprs[model._meta.pk.attname]
    sql = f"INSERT INTO {table_name} {columns} SELECT {', '.join(values)} FROM seq_1_to_{count} ORDER BY {order}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# Of every 100 instances (by seq % 100): these many are in review, the first UNKNOWN of them since their task's
# lease expired (its outcome unknown, its permit kept), the others since a task failed; the others succeeded.
IN_REVIEW = 5
UNKNOWN = 2
# The definitions of each namespace, as (name, version, the attempts of their TASK step): instances spread over
# them. An instance in review of a one-attempt definition has its step's attempts used up, of the others attempts
# left, as the engine would have written them: recovery judges the rows as it judges the engine's.
DEFINITIONS = (("bench", 1, BUDGET), ("bench", 2, BUDGET), ("orders", 1, 1))
BUSINESS_KEYS = ("order-", "invoice-", "refund-")


def _definitions(tenants) -> list[str]:
    """Every namespace's definitions, listed so that position ``k`` belongs to namespace ``k % len(tenants)``:
    ``seq % len(list)`` then names a definition of the namespace ``seq % len(tenants)`` names."""
    found = []
    for name, version, attempts in DEFINITIONS:
        spec = {"steps": [{**DEFINITION_SPEC["steps"][0], "max_attempts": attempts}, *DEFINITION_SPEC["steps"][1:]]}
        for ns, *_ in tenants:
            definition, _ = m.WorkflowDefinition.objects.get_or_create(
                namespace=ns, name=name, version=version, defaults={"spec": spec, "queues": ["bench"]}
            )
            found.append(definition.id)
    return found


def seed_instances(tenants, count: int, start: dt.datetime) -> None:
    """One-task instances, generated server side: millions of rows in minutes. Most succeeded; of every 100,
    IN_REVIEW are in review (a cause, a time, the step named, the gate shut), UNKNOWN of them with their task in
    review after its lease expired, the others after it failed; over three definitions per namespace and three
    business-key prefixes. The applications and queues then count the permits the tasks in review keep."""
    salt = new_id()[:8]

    def ident(tag: str) -> str:
        return f"MD5(CONCAT('{salt}{tag}', seq))"

    def pick(values: list[str]) -> str:
        return "ELT(1 + seq %% {n}, {v})".format(n=len(values), v=", ".join(f"'{v}'" for v in values))

    review = f"seq %% 100 < {IN_REVIEW}"
    definitions = _definitions(tenants)
    # The definition ``pick(definitions)`` names allows one attempt (the last of DEFINITIONS' rows).
    one_attempt = f"seq %% {len(definitions)} >= {len(definitions) - len(tenants)}"

    def either(in_review: str, otherwise: str) -> str:
        return f"CASE WHEN {review} THEN {in_review} ELSE {otherwise} END"

    def lost(lease_expired: str, failed: str, succeeded: str) -> str:
        """By the task's fate: its lease expired (in review), it failed (in review), it succeeded."""
        return f"CASE WHEN seq %% 100 < {UNKNOWN} THEN {lease_expired} ELSE {either(failed, succeeded)} END"

    ns = pick([t[0].id for t in tenants])
    when = f"DATE_ADD('{start:%Y-%m-%d %H:%M:%S}', INTERVAL seq * 1000 MICROSECOND)"
    finished = either("NULL", when)
    # The step's, activation's and task's state, the task's outcome, the attempt's state, and when they ended.
    held, outcome = lost("'NEEDS_REVIEW'", "'FAILED'", "'SUCCEEDED'"), lost("''", "'FAILED'", "'SUCCEEDED'")
    attempt_state, ended = lost("'UNKNOWN'", "'FAILED'", "'SUCCEEDED'"), lost("NULL", when, when)
    instance, step, activation, task, event = (ident(tag) for tag in "isakr")
    common = {"created_at": when, "updated_at": when}
    cause = lost(
        f"'{m.ReviewCause.TASK_OUTCOME_UNKNOWN}'",
        f"CASE WHEN {one_attempt} THEN '{m.ReviewCause.TASK_BUDGET_EXHAUSTED}'"
        f" ELSE '{m.ReviewCause.TASK_FAILED_BUDGET_LEFT}' END",
        "''",
    )
    result = lost("NULL", '\'{"error": "declined"}\'', "'{}'")
    tables = [
        (
            m.WorkflowInstance,
            {
                "id": instance,
                "namespace_id": ns,
                "definition_id": pick(definitions),
                "business_key": f"CONCAT({pick(list(BUSINESS_KEYS))}, seq)",
                "state": either(f"'{m.InstanceState.NEEDS_REVIEW}'", "'SUCCEEDED'"),
                "review_cause": cause,
                "review_since": either(when, "NULL"),
                "review_step_key": either("'work'", "''"),
                "input": "'{}'",
                "output": "'null'",
                "revision": "6",
                "completed_at": finished,
                **common,
            },
        ),
        (m.Gate, {"instance_id": instance, "open": "0", "revision": "2"}),
        (
            m.Step,
            {
                "id": ident("o"),
                "instance_id": instance,
                "key": f"'{ROOT_STEP_KEY}'",
                "kind": "'ROOT'",
                "state": either("'ACTIVE'", "'SUCCEEDED'"),
                **common,
            },
        ),
        (
            m.Step,
            {
                "id": step,
                "instance_id": instance,
                "key": "'work'",
                "kind": "'TASK'",
                "state": held,
                "current_activation_id": activation,
                "revision": "3",
                "activation_count": "1",
                "output": either("NULL", "'{}'"),
                **common,
            },
        ),
        (
            m.Activation,
            {
                "id": activation,
                "step_id": step,
                "instance_id": instance,
                "sequence": "1",
                "state": held,
                "revision": "3",
                "task_id": task,
                "input": "'{}'",
                "output": either("NULL", "'{}'"),
                "completed_at": ended,
                **common,
            },
        ),
        (
            m.Task,
            {
                "id": task,
                "namespace_id": ns,
                "application_id": pick([t[1].id for t in tenants]),
                "queue_id": pick([t[2].id for t in tenants]),
                "handler": "'demo.echo'",
                "input": "'{}'",
                "state": held,
                "revision": "3",
                "attempt_count": "1",
                # The first task of a step is allowed the step's attempts.
                "max_attempts": f"CASE WHEN {one_attempt} THEN 1 ELSE {BUDGET} END",
                "source_instance_id": instance,
                "source_activation_id": activation,
                "outcome": outcome,
                "result": result,
                "permit_held": lost("1", "0", "0"),
                "execution_settled": lost("0", "1", "1"),
                **common,
            },
        ),
        (
            m.Attempt,
            {
                "id": ident("t"),
                "task_id": task,
                "number": "1",
                "worker": "'bench'",
                "state": attempt_state,
                "started_at": when,
                "finished_at": ended,
                "result": result,
            },
        ),
        (
            m.ResultEvent,
            {
                "id": event,
                "task_id": task,
                "seq": "1",
                "kind": lost("'UNKNOWN'", "'RESULT'", "'RESULT'"),
                "outcome": outcome,
                "result": result,
                "task_revision": "3",
                "created_at": when,
            },
        ),
        (
            m.InboxRecord,
            {
                "id": ident("x"),
                "instance_id": instance,
                "source_kind": "'RESULT_EVENT'",
                "source_id": event,
                "task_id": task,
                "activation_id": activation,
                "state": "'CONSUMED'",
                "disposition": "'APPLIED'",
                "created_at": when,
                "consumed_at": when,
            },
        ),
    ]
    # The timeline: one created event per followed row, naming the state the row holds.
    subjects = (
        ("instance", instance, "''", either(f"'{m.InstanceState.NEEDS_REVIEW}'", "'SUCCEEDED'")),
        ("step", ident("o"), f"'{ROOT_STEP_KEY}'", either("'ACTIVE'", "'SUCCEEDED'")),
        ("step", step, "'work'", held),
        ("activation", activation, "'work'", held),
        ("task", task, "'work'", held),
        ("attempt", ident("t"), "'work'", attempt_state),
        ("inbox", ident("x"), "'work'", "'CONSUMED'"),
    )
    for sequence, (subject_type, subject, step_key, state) in enumerate(subjects, start=1):
        event = {
            "id": ident(f"e{sequence}"),
            "instance_id": instance,
            "sequence": str(sequence),
            "kind": f"'{subject_type}.created'",
            "subject_type": f"'{subject_type}'",
            "subject_id": subject,
            "step_key": step_key,
            "after": state,
            "actor_kind": "'engine'",
            "created_at": when,
        }
        tables.append((m.InstanceEvent, event))
    progress = Progress("instances + tasks (rows)", count * len(tables))
    with indexes_deferred(model for model, _ in tables):
        for model, exprs in tables:
            with transaction.atomic():
                insert_select(model, count, exprs)
            progress.add(count)
    permits_counted()


def permits_counted() -> None:
    """Each application and queue counts the permits its tasks hold, as the engine keeps them (a task in review
    keeps its permit), and allows at least 100 more, what an idle one allows by default."""
    for model, charged in ((m.Application, "application"), (m.Queue, "queue")):
        held = m.Task.objects.filter(permit_held=True, **{charged: OuterRef("pk")}).order_by().values(charged)
        with transaction.atomic():
            model.objects.update(active_tasks=Coalesce(Subquery(held.annotate(n=Count("id")).values("n")), 0))
            model.objects.update(max_active_tasks=Greatest("max_active_tasks", F("active_tasks") + 100))


def tenants_ensure() -> list[tuple]:
    """The four bench namespaces, each with its application, queue and definition."""
    tenants = []
    for name in ("bench", "bench-b", "bench-c", "bench-d"):
        ns, app, queues = namespace_ensure(name=name, application="bench", queues=["bench"])
        definition, _ = m.WorkflowDefinition.objects.get_or_create(
            namespace=ns, name="bench", version=1, defaults={"spec": DEFINITION_SPEC, "queues": ["bench"]}
        )
        tenants.append((ns, app, queues[0], definition))
    return tenants


# In this order: the parts written row by row (random keys) first, while their tables are small enough for the
# pool; the instances part after, its millions of rows in key order with its indexes built at its end.
SECTIONS = {
    "signals": lambda tenants, count, start: seed_signals(tenants[0], count, start),
    "activations": lambda tenants, count, start: seed_activations(tenants[0], count, start),
    "rounds": lambda tenants, count, start: seed_rounds(tenants[0], count, start),
    "instances": seed_instances,
}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full sizes (e.g. 0.01)")
    parser.add_argument(
        "--parts", default="signals,activations,rounds,instances", help="which histories to add (comma-separated)"
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - set(SECTIONS):
        parser.error(f"--parts: {', '.join(sorted(parts - set(SECTIONS)))} is not one of {', '.join(SECTIONS)}")
    database_ready()
    sizes = {
        "signals": int(1_000_000 * args.scale),
        "activations": int(100_000 * args.scale),
        "rounds": int(100_000 * args.scale),
        "instances": int(1_000_000 * args.scale),
    }
    started = time.monotonic()
    pool = buffer_pool_mib()
    print(f"innodb_buffer_pool_size: {pool} MiB", file=sys.stderr)
    if pool < 1024 and args.scale >= 0.1:
        print(
            "hint: the signals, activations and rounds are inserted row by row on random pages, which at this scale"
            " read from disk with a pool under 1 GiB; the server's owner can raise innodb_buffer_pool_size (the seed"
            " does not change server settings)",
            file=sys.stderr,
        )
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    tenants = tenants_ensure()
    # A partial run adds to the histories an earlier run recorded.
    summary_path = seed_summary_path()
    summary = json.loads(summary_path.read_text()) if summary_path.exists() and parts != set(SECTIONS) else {}
    summary |= {"namespace": tenants[0][0].name, "sizes": summary.get("sizes", {})}
    for part in (part for part in SECTIONS if part in parts):
        summary["sizes"][part] = sizes[part]
        made = SECTIONS[part](tenants, sizes[part], start)
        if made is not None:
            summary[part] = made
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary_path.parent.mkdir(exist_ok=True)
    summary_path.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
