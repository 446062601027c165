"""The one lock order of the code base, and bounded deadlock retry.

Every transaction that writes engine rows — recovery operations and engine transitions
alike — takes its row locks through a ``LockSet``: credential → operation key → proposal → instance
→ gate → steps by id → activations by id → waits by id → tasks by id → inbox records →
application quota → the queues by name → the per-task result stream last. The quota rows
are every namespace's hottest rows, so they come last: a transaction holds them only from
its first permit taken or given back to its commit (``engine.quota``). Locks are taken one
table at a time (MariaDB has no ``FOR UPDATE OF``, so a joined locking read would lock the
joined rows out of order).
"""

import contextlib
import datetime as dt
import enum
import functools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import Model

from core import clock
from core.db import reads as db_reads
from history import models
from history.events import events_batched
from history.prepared import Prepared

logger = logging.getLogger("weave.locking")
T = TypeVar("T")


class Level(enum.IntEnum):
    CREDENTIAL = 1
    OPERATION_KEY = 2
    PROPOSAL = 3
    INSTANCE = 4
    GATE = 5
    STEP = 6
    ACTIVATION = 7
    WAIT = 8
    TASK = 9
    INBOX = 10
    APPLICATION = 11
    QUEUE = 12
    RESULT_STREAM = 13


_MODEL_OF = {
    Level.CREDENTIAL: models.Credential,
    Level.APPLICATION: models.Application,
    Level.OPERATION_KEY: models.IdempotencyReceipt,
    Level.PROPOSAL: models.Proposal,
    Level.QUEUE: models.Queue,
    Level.INSTANCE: models.WorkflowInstance,
    Level.GATE: models.Gate,
    Level.STEP: models.Step,
    Level.ACTIVATION: models.Activation,
    Level.WAIT: models.Wait,
    Level.TASK: models.Task,
    Level.INBOX: models.InboxRecord,
}


@functools.cache
def _locking_read(model: type[Model], skip_locked: bool) -> Prepared:
    """``SELECT … WHERE pk IN (keys) ORDER BY pk FOR UPDATE [SKIP LOCKED]``, compiled once per number of keys: a
    lock is the engine's most frequent statement, and building it through the queryset every time cost more than
    running it."""
    return Prepared(
        lambda *keys: model.objects.select_for_update(skip_locked=skip_locked).filter(pk__in=keys).order_by("pk")
    )


class LockOrderViolation(AssertionError):
    """A lock was requested out of the fixed order: a programming error, never retried."""


class LockSet:
    """Row locks for one transaction, refused when they would break the order."""

    def __init__(self) -> None:
        if not connection.in_atomic_block:
            raise LockOrderViolation("row locks need an open transaction")
        self.level = 0
        self._last_key: object = None

    def _enter(self, level: Level, first_key: object) -> None:
        if level < self.level or (level == self.level and first_key is not None and first_key < self._last_key):
            held = Level(self.level).name if self.level in Level._value2member_map_ else "the result stream"
            raise LockOrderViolation(f"{level.name} locked after {held}")
        self.level = level

    def lock(self, level: Level, ids: Iterable[str], *, skip_locked: bool = False) -> dict[str, Model]:
        """Lock the rows of ``level`` with these primary keys, in key order; returns them by key.

        ``skip_locked`` leaves out rows another transaction holds (MariaDB 10.6+): it never
        waits, so a background pass can move on to other work instead of queueing.
        """
        if level in (Level.QUEUE, Level.RESULT_STREAM):
            raise LockOrderViolation(f"use lock_queues / lock_result_stream for {level.name}")
        keys = sorted(set(ids))
        if not keys:
            return {}
        self._enter(level, keys[0])
        found = {row.pk: row for row in _locking_read(_MODEL_OF[level], skip_locked)(*keys)}
        self._last_key = keys[-1]
        return found

    def lock_one(self, level: Level, pk: str, *, skip_locked: bool = False) -> Model | None:
        return self.lock(level, [pk], skip_locked=skip_locked).get(pk)

    def lock_by_write(self, level: Level, key: object) -> None:
        """Record the lock an UPDATE of one row of ``level`` is about to take; refused out of order."""
        self._enter(level, key)
        self._last_key = key

    def lock_application(self, namespace_id: str, name: str) -> models.Application | None:
        """Lock a namespace's application by its name (a transaction charges one application)."""
        self._enter(Level.APPLICATION, None)
        row = models.Application.objects.select_for_update().filter(namespace_id=namespace_id, name=name).first()
        if row is not None:
            self._last_key = row.pk
        return row

    def lock_steps_of(self, instance_id: str) -> dict[str, models.Step]:
        """Lock every step of an instance in one statement; returns them by key.

        Only after the instance's own lock and before any other step: every transaction that
        locks a step holds its instance first, so the steps of one instance cannot deadlock.
        """
        if self.level >= Level.STEP or self.level < Level.INSTANCE:
            raise LockOrderViolation("the steps of an instance are locked right after the instance (and gate)")
        self._enter(Level.STEP, None)
        rows = list(models.Step.objects.select_for_update().filter(instance_id=instance_id).order_by("pk"))
        if rows:
            self._last_key = rows[-1].pk
        return {row.key: row for row in rows}

    def lock_queues(self, namespace_id: str, names: Iterable[str]) -> dict[str, models.Queue]:
        """Lock a definition's queues, sorted by name; returns them by name."""
        names = sorted(set(names))
        if not names:
            return {}
        self._enter(Level.QUEUE, names[0])
        rows = (
            models.Queue.objects.select_for_update().filter(namespace_id=namespace_id, name__in=names).order_by("name")
        )
        found = {row.name: row for row in rows}
        self._last_key = names[-1]
        return found

    def lock_result_stream(self, task_id: str) -> int:
        """Lock one task's result stream; returns the next sequence number. Nothing is locked after it."""
        self._enter(Level.RESULT_STREAM, None)
        self.level = Level.RESULT_STREAM + 1
        last = (
            models.ResultEvent.objects.select_for_update()
            .filter(task_id=task_id)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        return (last or 0) + 1


# MySQL/MariaDB: 1213 deadlock found, 1205 lock wait timeout. SQLite: "database is locked".
_RETRYABLE_MYSQL = {1213, 1205}


def is_retryable(exc: OperationalError) -> bool:
    """A deadlock, a lock wait timeout, or (on a Galera cluster) a certification conflict, which reads as 1213."""
    code = exc.args[0] if exc.args else None
    if code in _RETRYABLE_MYSQL:
        return True
    return "database is locked" in str(exc)


@contextlib.contextmanager
def reads_from_any_commit() -> Iterator[None]:
    """On a Galera cluster, reads that need not wait for the latest commits of other nodes (the history lists,
    whose contract already lets a page move); the session's causal reads come back after. Elsewhere a no-op.
    The backend owns the read mode: this only asks it to switch, on this thread's connection."""
    with db_reads.reads_from_any_commit(connection):
        yield


class RetryStats:
    deadlocks_retried = 0


def atomic_with_retry(fn: Callable[[], T], *, attempts: int = 5) -> T:
    """Run ``fn`` in one transaction, retrying a deadlock or lock timeout a bounded number of times."""
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic(), events_batched():
                return fn()
        except OperationalError as exc:
            if attempt == attempts or not is_retryable(exc) or connection.in_atomic_block:
                raise
            RetryStats.deadlocks_retried += 1
            logger.warning("retrying after %s (attempt %d)", exc, attempt)
            # Jittered: two transactions that collided (two runners on two cluster nodes) do not meet again.
            time.sleep(random.uniform(0.005, 0.02) * attempt)
    raise AssertionError("unreachable")


def lease_take(model: type[Model], pk: str, *, state: str, lease: dt.timedelta) -> Model | None:
    """The row of ``model`` while it is in ``state``, held for ``lease`` from now by whoever calls (a decision's
    or a campaign's driver: one at a time); None when another transaction has it locked, its lease is not over,
    or it is in another state. The holder clears ``lease_until`` when it is done."""

    def take():
        row = model.objects.select_for_update(skip_locked=True).filter(pk=pk).first()
        now = clock.now()
        if row is None or row.state != state or (row.lease_until and row.lease_until > now):
            return None
        row.lease_until = now + lease
        row.save(update_fields=["lease_until"])
        return row

    return atomic_with_retry(take)
