"""The rule that keeps every guarded decision certifiable on a Galera cluster, checked per transaction.

A row lock is its node's own: two transactions on two nodes may each lock a row and decide on it, and
certification compares only what they wrote. So a transaction that writes an engine row writes every row
it locked as a guard; a concurrent writer of that row on another node then conflicts with it at commit.
``write_sets_checked`` records, per committed transaction, the rows ``LockSet`` locked and the rows its
UPDATE statements named, and lists each locked row left unwritten by a transaction that wrote an engine row.

Records are not engine rows: audits, timeline events, receipts, proposals, notes, attention, incidents. A
transaction that writes only records decided nothing about the engine's rows: a proposal is checked again,
in full, by the approval that runs it (which writes the instance); the timeline's per-instance sequence and
a receipt's key are unique keys, which certification compares as it compares rows.

Rows whose guard is another row:
- the rows an instance owns (its gate, steps, activations, waits, tasks, inbox records) are guarded by the
  instance row: every transaction locks the instance before them, and one that writes must write it;
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

from django.db import connection

from history import locking
from history.models import (
    Activation,
    Application,
    Credential,
    ExecutionAudit,
    Gate,
    IdempotencyReceipt,
    InboxRecord,
    Incident,
    InstanceEvent,
    Note,
    Proposal,
    Queue,
    ReviewAttention,
    SignalOperation,
    Step,
    Task,
    Wait,
    WorkflowInstance,
    WorkflowOperation,
)
from weave_site.mysql.base import DatabaseWrapper

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
_WRITE = re.compile(r"^(UPDATE|INSERT INTO|DELETE FROM) [`\"]?(\w+)[`\"]?", re.IGNORECASE)
_ID = re.compile(r"^[0-9a-f]{32}$")


def _caller() -> str:
    """The product's frame that asked for the lock: file and line."""
    for frame in traceback.extract_stack()[-3::-1]:
        if "/history/locking.py" not in frame.filename and "/tests/" not in frame.filename:
            return f"{frame.filename.rsplit('/', 2)[-2]}/{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"


class _Transaction(threading.local):
    def __init__(self) -> None:
        self.locked: dict[tuple[str, str], str] = {}  # → where it was locked
        self.written: set[tuple[str, str]] = set()
        self.wrote = False


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
                state.locked.setdefault((row._meta.db_table, row.pk), site)

    def locking_lock(self, level, ids, *, skip_locked=False):
        found = lock(self, level, ids, skip_locked=skip_locked)
        remember(found.values())
        return found

    def statement(execute, sql, params, many, context):
        if not context["connection"].in_atomic_block:  # a statement of its own (autocommit): no locks held
            return execute(sql, params, many, context)
        write = _WRITE.match(sql.lstrip())
        if write is None:
            return execute(sql, params, many, context)
        verb, table = write.group(1).upper(), write.group(2)
        state.wrote = state.wrote or table not in RECORDS
        if verb == "UPDATE":
            flat = [p for group in params for p in group] if many else list(params or [])
            state.written.update((table, p) for p in flat if isinstance(p, str) and _ID.match(p))
        return execute(sql, params, many, context)

    def checked_commit(self):
        if state.wrote:
            instance_written = any(table == INSTANCE for table, _ in state.locked.keys() & state.written)
            violations.extend(
                f"{table} locked at {site}, not written"
                for (table, pk), site in sorted(state.locked.items())
                if (table, pk) not in state.written and not (table in OWNED and instance_written)
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
    try:
        yield violations
    finally:
        connection.execute_wrappers.remove(statement)
        locking.LockSet.lock = lock
        DatabaseWrapper._commit, DatabaseWrapper._rollback, DatabaseWrapper.connect = commit, rollback, connect_original
