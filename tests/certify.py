"""The rule that keeps every guarded decision certifiable on a Galera cluster, checked per transaction.

A row lock is its node's own: two transactions on two nodes may each lock a row and decide on it, and
certification compares only what they wrote. So a transaction that writes an engine row writes every row
it locked as a guard; a concurrent writer of that row on another node then conflicts with it at commit.
``write_sets_checked`` records, per committed transaction, the rows ``LockSet`` locked, the rows its UPDATE
and DELETE statements named and the instances the engine rows it wrote belong to, and lists each locked row
left unwritten by a transaction that wrote an engine row under that row's instance.

Records are not engine rows: audits, timeline events, receipts, proposals, notes, attention, incidents. A
transaction that writes only records decided nothing about the engine's rows: a proposal is checked again,
in full, by the approval that runs it (which writes the instance); the timeline's per-instance sequence and
a receipt's key are unique keys, which certification compares as it compares rows.

Late evidence is a record too: a late result event and its inbox record, inserted already LATE_RECORDED,
change no row and nothing decides on them. Its attempt is UNKNOWN, which is final; its one decision, that the
attempt has no late event yet, is read after the stream's position, so two reports on two nodes either see
each other or meet on the stream's unique (task, seq), at commit or at the insert (``engine.worker.task_complete``
then runs the report again).

A lock guards the writes under its own instance: an instance none of whose rows the transaction wrote (nor
inserted: the instance an inserted row names, or its locked task's) was decided nothing on — a batch claim's
candidate found taken under its lock is left as it was. A write whose instance the check cannot tell (a row
not locked here, a delete) counts under every instance.

Rows whose guard is another row:
- the rows an instance owns (its gate, steps, activations, waits, tasks, inbox records) are guarded by the
  instance row: every transaction locks the instance before them, and one that writes must write it;
- a task locked to order the decisions on one of its attempts: each of them writes the attempt (a claim
  creates it; a heartbeat, a completion and the lease expiry update it), so the attempt written stands for
  its task;
- quota counters (application, queues): taking or giving back a permit writes the counter row (the value
  read under the lock, or a conditional decrement); a queue locked and left unwritten took no permit, and
  not taking one only defers work to a later pass;
- a credential: an operation racing a revocation is one of their two orders either way.
"""

import contextlib
import re
import threading
import traceback
from collections.abc import Iterator

from django.db import connection, connections
from django.db.models.signals import post_save

from core.db.base import DatabaseWrapper
from history import locking
from history.models import (
    Activation,
    Application,
    Attempt,
    Credential,
    Disposition,
    ExecutionAudit,
    Gate,
    IdempotencyReceipt,
    InboxRecord,
    Incident,
    InstanceEvent,
    Note,
    Proposal,
    Queue,
    ResultEvent,
    ReviewAttention,
    SignalOperation,
    Step,
    Task,
    Wait,
    WorkflowInstance,
    WorkflowOperation,
)

OWNED = {model._meta.db_table for model in (Gate, Step, Activation, Wait, Task, InboxRecord)}
EXEMPT = {model._meta.db_table for model in (Credential, Application, Queue)}
INSTANCE = WorkflowInstance._meta.db_table
RECORDS = {
    model._meta.db_table
    for model in (
        WorkflowOperation,
        ExecutionAudit,
        SignalOperation,
        InstanceEvent,
        IdempotencyReceipt,
        Proposal,
        Note,
        ReviewAttention,
        Incident,
    )
}
# Inserted as late evidence: (column, value) of the row that makes it one.
EVIDENCE = {
    ResultEvent._meta.db_table: ("late", True),
    InboxRecord._meta.db_table: ("disposition", Disposition.LATE_RECORDED),
}
# The column naming the instance a row belongs to.
OWNER_COLUMNS = ("instance_id", "source_instance_id", "workflow_id")
OWNER = {
    model: next(field.attname for field in model._meta.concrete_fields if field.attname in OWNER_COLUMNS)
    for model in (Gate, Step, Activation, Wait, Task, InboxRecord, IdempotencyReceipt, Proposal)
}
ANY = "*"  # a write whose instance is not known: under every instance
_WRITE = re.compile(r"^(UPDATE|INSERT INTO|DELETE FROM) [`\"]?(\w+)[`\"]?", re.IGNORECASE)
_COLUMNS = re.compile(r"^[^(]*\(([^)]*)\)\s*VALUES", re.IGNORECASE)
_ID = re.compile(r"^[0-9a-f]{32}$")


def _caller() -> str:
    """The product's frame that asked for the lock: file and line."""
    for frame in traceback.extract_stack()[-3::-1]:
        if "/history/locking.py" not in frame.filename and "/tests/" not in frame.filename:
            return f"{frame.filename.rsplit('/', 2)[-2]}/{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"


class _Transaction(threading.local):
    def __init__(self) -> None:
        self.locked: dict[tuple[str, str], tuple[str, str]] = {}  # → (where it was locked, its instance)
        self.written: set[tuple[str, str]] = set()
        self.under: set[str] = set()  # the instances the engine rows written belong to (none: wrote only records)


def _flat(params, many: bool) -> list:
    return [p for group in params for p in group] if many else list(params or [])


def _inserted(sql: str, params, many: bool) -> list[dict] | None:
    """The rows an INSERT writes, column → value; None when its values are not one placeholder each."""
    columns = _COLUMNS.match(sql)
    if columns is None:
        return None
    names = [name.strip(' `"') for name in columns.group(1).split(",")]
    flat = _flat(params, many)
    if not flat or len(flat) % len(names):
        return None
    return [dict(zip(names, flat[i : i + len(names)], strict=True)) for i in range(0, len(flat), len(names))]


@contextlib.contextmanager
def write_sets_checked() -> Iterator[list[str]]:
    """Yields the list of violations, filled as transactions commit (in every thread)."""
    state, violations = _Transaction(), []
    lock = locking.LockSet.lock
    commit, rollback = DatabaseWrapper._commit, DatabaseWrapper._rollback

    def remember(rows) -> None:
        site = _caller()
        for row in rows:
            if row._meta.db_table not in EXEMPT:
                owner = row.pk if isinstance(row, WorkflowInstance) else getattr(row, OWNER[type(row)], ANY)
                state.locked.setdefault((row._meta.db_table, row.pk), (site, owner))

    def locking_lock(self, level, ids, *, skip_locked=False):
        found = lock(self, level, ids, skip_locked=skip_locked)
        remember(found.values())
        return found

    def owner_of_inserted(row: dict) -> str:
        named = next((row[column] for column in OWNER_COLUMNS if row.get(column)), None)
        task = state.locked.get((Task._meta.db_table, row.get("task_id")))
        return named or (task[1] if task else ANY)

    def write(verb: str, table: str, sql: str, params, many: bool) -> None:
        if verb == "INSERT INTO":
            if table in RECORDS:
                return
            rows = _inserted(sql, params, many)
            column, value = EVIDENCE.get(table, (None, None))
            engine = [row for row in rows or [{}] if column is None or row.get(column) != value]
            state.under.update(owner_of_inserted(row) for row in engine)
            return
        rows = {(table, p) for p in _flat(params, many) if isinstance(p, str) and _ID.match(p)}
        state.written.update(rows)
        if table in RECORDS:
            return
        locked = [state.locked[row][1] for row in rows if row in state.locked and verb == "UPDATE"]
        state.under.update(locked or [ANY])

    def statement(execute, sql, params, many, context):
        if not context["connection"].in_atomic_block:  # a statement of its own (autocommit): no locks held
            return execute(sql, params, many, context)
        matched = _WRITE.match(sql.lstrip())
        if matched is not None:
            write(matched.group(1).upper(), matched.group(2), sql.lstrip(), params, many)
        return execute(sql, params, many, context)

    def attempt_saved(sender, instance, using, **kwargs) -> None:
        if connections[using].in_atomic_block:
            state.written.add((Task._meta.db_table, instance.task_id))  # the attempt stands for its task

    def checked_commit(self):
        if state.under:
            done = {pk for table, pk in state.locked.keys() & state.written if table == INSTANCE}
            violations.extend(
                f"{table} locked at {site}, not written"
                for (table, pk), (site, owner) in sorted(state.locked.items())
                if (table, pk) not in state.written
                and not (table in OWNED and owner in done)
                and (owner in state.under or ANY in state.under)
            )
        state.__init__()
        return commit(self)

    def reset_rollback(self):
        state.__init__()
        return rollback(self)

    def connect(self, *args, **kwargs):
        result = connect_original(self, *args, **kwargs)
        self.execute_wrappers.append(statement)
        return result

    connect_original = DatabaseWrapper.connect
    patches = {
        (locking.LockSet, "lock"): locking_lock,
        (DatabaseWrapper, "_commit"): checked_commit,
        (DatabaseWrapper, "_rollback"): reset_rollback,
        (DatabaseWrapper, "connect"): connect,
    }
    for (owner, name), replacement in patches.items():
        setattr(owner, name, replacement)
    connection.execute_wrappers.append(statement)  # this thread's connection is open already
    post_save.connect(attempt_saved, sender=Attempt)
    try:
        yield violations
    finally:
        post_save.disconnect(attempt_saved, sender=Attempt)
        connection.execute_wrappers.remove(statement)
        locking.LockSet.lock = lock
        DatabaseWrapper._commit, DatabaseWrapper._rollback, DatabaseWrapper.connect = commit, rollback, connect_original
