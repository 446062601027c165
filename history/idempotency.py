"""Idempotency for every command, engine and recovery: one key syntax, one fingerprint, one receipt.

A key is 1 to ``limits.MAX_IDEMPOTENCY_KEY`` printable ASCII characters without space, unique
per namespace; the fingerprint (operation, target, canonical command) decides whether a reused
key names the same command (replay the first answer) or another one (ALREADY_EXISTS). Two ways
of holding the key, each kept for what its commands need:

- ``receipt_run`` (start, signal): the answer is frozen with the work's writes; a concurrent
  request with the same key loses on the unique index and answers as the winner's replay.
- ``receipt_claim`` / ``receipt_freeze`` (recovery): the key row is the OPERATION_KEY lock, claimed
  inside the operation's transaction before anything else is read; a concurrent claim raises
  ``KeyRaced`` and the caller runs again to replay.

A refused command stores nothing, so its key can be used again.
"""

import hashlib
import json
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from django.db import IntegrityError

from core import clock, exactjson, limits
from core.errors import AlreadyExists, InvalidArgument
from history.locking import Level, LockSet, atomic_with_retry
from history.models import IdempotencyReceipt

HEADER = "Idempotency-Key"


def key_check(value: object, *, field: str = HEADER) -> str:
    """The Idempotency-Key: 1 to 128 printable ASCII characters without space."""
    if value is None:
        raise InvalidArgument(f"{field} is required", field=field)
    if (
        type(value) is not str
        or len(value) > limits.MAX_IDEMPOTENCY_KEY
        or limits.IDEMPOTENCY_KEY_RE.fullmatch(value) is None
    ):
        raise InvalidArgument(
            f"{field} must be 1 to {limits.MAX_IDEMPOTENCY_KEY} printable ASCII characters without space",
            field=field,
        )
    return value


def fingerprint(*, operation: str, target: str, command: dict) -> str:
    """What makes two requests the same command: operation, target and the canonical command text."""
    return hashlib.sha256(exactjson.canonical([operation, target, command]).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Receipt:
    """A committed answer: ``text`` is its exact JSON, byte-identical on every replay."""

    text: str
    status: int
    replayed: bool

    @cached_property
    def data(self) -> Mapping:
        # A receipt holds only ids, strings, booleans and small integers: plain JSON reads it exactly.
        return types.MappingProxyType(json.loads(self.text))


class KeyRaced(Exception):
    """Another transaction committed this key first: run again to replay its receipt."""


def _conflict() -> AlreadyExists:
    return AlreadyExists(f"this {HEADER} was already used for a different command", field=HEADER)


def _receipt_of(row: IdempotencyReceipt, *, replayed: bool) -> Receipt:
    return Receipt(text=row.response, status=row.status_code, replayed=replayed)


def receipt_run(
    *,
    namespace_id: str,
    key: str,
    operation: str,
    target: str,
    command: dict,
    work: Callable[[LockSet], dict],
    status: int = 200,
) -> Receipt:
    """Run ``work`` once per (namespace, key): it returns the answer, frozen with the work's writes.

    Same key + same command replays the first answer; same key + another command is ALREADY_EXISTS.
    """
    expected = fingerprint(operation=operation, target=target, command=command)

    def replay() -> Receipt | None:
        found = IdempotencyReceipt.objects.filter(namespace_id=namespace_id, key=key).first()
        if found is None:
            return None
        if found.fingerprint != expected:
            raise _conflict()
        return _receipt_of(found, replayed=True)

    earlier = replay()
    if earlier is not None:
        return earlier

    def run() -> Receipt:
        data = work(LockSet())
        row = IdempotencyReceipt.objects.create(
            namespace_id=namespace_id,
            key=key,
            fingerprint=expected,
            operation=operation,
            workflow_id=data.get("workflow_id") or data.get("id"),
            status_code=status,
            response=exactjson.dumps(data),
            created_at=clock.now(),
        )
        return _receipt_of(row, replayed=False)

    try:
        return atomic_with_retry(run)
    except IntegrityError:
        # A concurrent request with the same key committed first: answer as its replay.
        earlier = replay()
        if earlier is None:
            raise
        return earlier


def receipt_claim(
    *, locks: LockSet, namespace_id: str, key: str, fingerprint: str, operation: str, instance_id: str
) -> IdempotencyReceipt:
    """Lock the key row, or claim the key with an unfilled row; the same key for another command conflicts.

    Returns the stored row: filled (``response`` set) when this is a replay, empty when claimed now.
    """
    existing = IdempotencyReceipt.objects.filter(namespace_id=namespace_id, key=key).values_list("id", flat=True)
    for pk in existing:
        row = locks.lock_one(Level.OPERATION_KEY, pk)
        if row is not None:
            if row.fingerprint != fingerprint:
                raise _conflict()
            return row
    try:
        row = IdempotencyReceipt.objects.create(
            namespace_id=namespace_id,
            key=key,
            fingerprint=fingerprint,
            operation=operation,
            workflow_id=instance_id,
            response="",
        )
    except IntegrityError:
        raise KeyRaced() from None
    locks.lock_one(Level.OPERATION_KEY, row.pk)
    return row


def receipt_replay(*, row: IdempotencyReceipt) -> Receipt:
    return _receipt_of(row, replayed=True)


def receipt_freeze(*, row: IdempotencyReceipt, data: dict, status: int = 200) -> Receipt:
    """Store the answer in the claimed key row; a replay returns exactly this text."""
    row.response = exactjson.dumps(data)
    row.status_code = status
    row.save(update_fields=["response", "status_code"])
    return _receipt_of(row, replayed=False)
