"""Idempotency: one operation key per (namespace, key), holding the first frozen receipt.

The key row is the operation-key lock of SPEC §5.2. A new key is claimed by inserting the
receipt row inside the operation's transaction: concurrent requests with the same key wait on
that row (the unique index makes them) and, once it commits, replay its receipt. A refused
command rolls the row back with everything else, so the key may be used again.
"""

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass

from django.db import IntegrityError

from history import exactjson
from history.errors import AlreadyExists
from history.locking import Level, LockSet
from history.models import IdempotencyReceipt


@dataclass(frozen=True)
class Receipt:
    """The answer to a committed recovery command; ``text`` is the exact JSON of ``data``."""

    data: Mapping
    text: str
    status: int
    replayed: bool


class KeyRaced(Exception):
    """Another transaction committed this key first: run again to replay its receipt."""


def _receipt_of(row: IdempotencyReceipt, *, replayed: bool) -> Receipt:
    # A receipt holds only ids, strings, booleans and small integers: plain JSON reads it exactly.
    data = json.loads(row.response)
    return Receipt(data=types.MappingProxyType(data), text=row.response, status=row.status_code, replayed=replayed)


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
                raise AlreadyExists("this Idempotency-Key was already used for a different command")
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
