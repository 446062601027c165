"""Validating client commands (field-named errors) and idempotency receipts."""

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError

from history import clock, exactjson
from history.errors import AlreadyExists, InvalidArgument, NotFound
from history.identity import Identity
from history.ids import is_id, parse_revision
from history.locking import LockSet, atomic_with_retry
from history.models import IdempotencyReceipt, WorkflowDefinition, WorkflowInstance

IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_text(value: Any) -> bool:
    """A JSON string; a number literal (``exactjson.Number``, a str subclass) is not one."""
    return isinstance(value, str) and not isinstance(value, exactjson.Number)


def command_object(command: Any, *, allowed: tuple[str, ...]) -> dict:
    """The command as a JSON object with no unknown keys."""
    if not isinstance(command, dict):
        raise InvalidArgument("the body must be a JSON object", field="body")
    for key in command:
        if key not in allowed:
            raise InvalidArgument(f"{key}: unknown field", field=key)
    return command


def text_field(command: dict, key: str, *, max_length: int, required: bool = True, blank: bool = False) -> str:
    if key not in command:
        if required:
            raise InvalidArgument(f"{key}: is required", field=key)
        return ""
    value = command[key]
    if not is_text(value) or len(value) > max_length or "\x00" in value or (not blank and not value.strip()):
        raise InvalidArgument(
            f"{key}: must be a {'' if blank else 'non-blank '}string of at most {max_length} characters", field=key
        )
    return value


def reason_field(command: dict, *, required: bool) -> str:
    """1–1024 characters, not all whitespace, no NUL."""
    return text_field(command, "reason", max_length=1024, required=required)


def evidence_ref_field(command: dict) -> str:
    """Optional; 1–512 characters without whitespace or control characters."""
    if "evidence_ref" not in command:
        return ""
    value = command["evidence_ref"]
    if not is_text(value) or not 1 <= len(value) <= 512 or any(c.isspace() for c in value) or _CONTROL.search(value):
        raise InvalidArgument(
            "evidence_ref: 1-512 characters without whitespace or control characters", field="evidence_ref"
        )
    return value


def revision_field(command: dict, key: str) -> int:
    if key not in command:
        raise InvalidArgument(f"{key}: is required", field=key)
    revision = parse_revision(command[key]) if is_text(command[key]) else None
    if revision is None:
        raise InvalidArgument(f'{key}: must be a decimal string revision ("12")', field=key)
    return revision


def id_argument(value: Any, field: str) -> str:
    if not is_text(value) or not is_id(value):
        raise InvalidArgument(f"{field}: must be 32 lowercase hex characters", field=field)
    return value


def idempotency_key_argument(key: Any) -> str:
    if not is_text(key) or IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise InvalidArgument("Idempotency-Key: 1-128 printable ASCII characters", field="Idempotency-Key")
    return key


def instance_visible(*, identity: Identity, instance_id: str) -> tuple[WorkflowInstance, WorkflowDefinition]:
    """The instance in the caller's namespace behind accessible queues, else NOT_FOUND (unlocked read)."""
    instance = WorkflowInstance.objects.filter(pk=instance_id, namespace_id=identity.namespace_id).first()
    definition = WorkflowDefinition.objects.filter(pk=instance.definition_id).first() if instance else None
    if definition is None or not identity.can_access_queues(definition.queues):
        raise NotFound(f"workflow {instance_id} not found")
    return instance, definition


def rfc3339(value: dt.datetime | None) -> str | None:
    """UTC with ``Z``; no fraction when it is zero, otherwise exactly 6 digits."""
    if value is None:
        return None
    text = value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{value.microsecond:06d}Z" if value.microsecond else f"{text}Z"


@dataclass(frozen=True)
class Receipt:
    """A committed answer: ``data`` is exact JSON text, byte-identical on every replay."""

    data: str
    status: int
    replayed: bool


def _fingerprint(operation: str, target: str, command: dict) -> str:
    return hashlib.sha256(exactjson.canonical([operation, target, command]).encode()).hexdigest()


def receipt_run(
    *,
    identity: Identity,
    key: str,
    operation: str,
    target: str,
    command: dict,
    work: Callable[[LockSet], dict],
    status: int = 200,
) -> Receipt:
    """Run ``work`` once per (namespace, key): it returns the answer, frozen with the work's writes.

    Same key + same command replays the first answer; same key + another command is ALREADY_EXISTS.
    A refused command stores nothing, so its key can be used again.
    """
    fingerprint = _fingerprint(operation, target, command)

    def replay() -> Receipt | None:
        found = IdempotencyReceipt.objects.filter(namespace_id=identity.namespace_id, key=key).first()
        if found is None:
            return None
        if found.fingerprint != fingerprint:
            raise AlreadyExists("this Idempotency-Key was used for another command", field="Idempotency-Key")
        return Receipt(data=found.response, status=found.status_code, replayed=True)

    earlier = replay()
    if earlier is not None:
        return earlier

    def run() -> Receipt:
        locks = LockSet()
        data = work(locks)
        text = exactjson.dumps(data)
        IdempotencyReceipt.objects.create(
            namespace_id=identity.namespace_id,
            key=key,
            fingerprint=fingerprint,
            operation=operation,
            workflow_id=data.get("workflow_id") or data.get("id"),
            status_code=status,
            response=text,
            created_at=clock.now(),
        )
        return Receipt(data=text, status=status, replayed=False)

    try:
        return atomic_with_retry(run)
    except IntegrityError:
        # A concurrent request with the same key committed first: answer as its replay.
        earlier = replay()
        if earlier is None:
            raise
        return earlier
