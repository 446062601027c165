"""Poison isolation: one item that fails never stops the background for every other item.

A duty (a runner pass, the inbox consumer, a worker) runs each item in its own transaction.
A non-database error on an item rolls that item back and is recorded as an ``Incident`` in a
transaction of its own; the item's instance enters review, and the duty goes on. While the
incident is open the duty's candidate queries leave the item out, so it can neither fill a
batch forever nor be retried in a loop. Database errors (``django.db.Error``: the server's
answers and a lost connection alike) are not poison: they leave the duty (the caller backs off
and retries, ``engine.background.Outage``).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django import db
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from core import clock
from core.logs import log_context
from engine.state import instance_enter_review, touch
from history.locking import Level, LockSet, is_retryable
from history.models import Incident, ReviewCause, WorkflowInstance

log = logging.getLogger("weave.background")
T = TypeVar("T")

MESSAGE_LENGTH = 1024


@dataclass(frozen=True)
class Item:
    """One unit of a duty's work. ``item_id`` may be computed only when the item failed."""

    duty: str
    kind: str
    item_id: str | Callable[[], str | None]
    instance_id: str | None = None


def open_item_ids(duty: str) -> QuerySet:
    """Ids of the duty's items with an open incident (a subquery for the candidate queries)."""
    return Incident.objects.filter(duty=duty, resolved_at__isnull=True).values("item_id")


def open_instance_ids(duty: str) -> QuerySet:
    """Instances with an open incident of the duty (a subquery for per-instance candidate queries)."""
    return Incident.objects.filter(duty=duty, resolved_at__isnull=True, instance__isnull=False).values("instance_id")


def isolated(item: Item, work: Callable[[], T]) -> T | None:
    """``work()``, or None after recording a non-database error on the item as an incident.

    An item still colliding with another transaction after the bounded retry is left for the next pass, as
    one another runner holds is (on a Galera cluster SKIP LOCKED does not see another node's locks: the
    collision shows at commit instead)."""
    # Every line logged about the item (its incident, a retry given up) names its instance.
    with log_context(instance=item.instance_id):
        try:
            return work()
        except db.OperationalError as error:
            if not is_retryable(error):
                raise
            log.warning("%s %s: busy after retries, left for the next pass", item.duty, item.instance_id)
            return None
        except db.Error:
            raise
        except Exception as error:
            item_id = (item.item_id() if callable(item.item_id) else item.item_id) or item.instance_id or ""
            incident_record(
                duty=item.duty, item_kind=item.kind, item_id=item_id, instance_id=item.instance_id, error=error
            )
            return None


def error_class_of(error: BaseException) -> str:
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return name[:128]


def _message_of(error: BaseException) -> str:
    try:
        text = str(error)[: MESSAGE_LENGTH * 2]
    except Exception:  # an exception whose text cannot be made is still recorded, by its class
        return ""
    # A message may quote client text: lone surrogates and NUL would make the incident itself unwritable.
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:MESSAGE_LENGTH]


def incident_record(*, duty: str, item_kind: str, item_id: str, instance_id: str | None, error: Exception) -> Incident:
    """Record (or count again, reopening it if resolved) the incident of one item, in its own transaction.

    The item's instance, when it is RUNNING or CANCELLING, enters review (gate closed) with a
    reason naming the duty, the item and the error class — never the message, which may quote
    client data. The log line carries the same, never the message either.
    """
    error_class = error_class_of(error)
    message = _message_of(error)
    record = (duty, item_kind, item_id, instance_id, error_class, message)
    try:
        with transaction.atomic():
            incident = _record(*record, review=True)
    except db.Error:
        raise
    except Exception as review_error:  # the review transition itself failed: keep at least the record
        log.error("%s: %s %s: entering review failed with %s", duty, item_kind, item_id, error_class_of(review_error))
        with transaction.atomic():
            incident = _record(*record, review=False)
    log.error(
        "%s: %s %s failed with %s (instance %s); incident %s seen %d time(s), the item is skipped until resolved",
        duty,
        item_kind,
        item_id,
        error_class,
        instance_id or "-",
        incident.id,
        incident.count,
    )
    return incident


def _record(
    duty: str, item_kind: str, item_id: str, instance_id: str | None, error_class: str, message: str, *, review: bool
) -> Incident:
    now = clock.now()
    instance = None
    if instance_id is not None:
        locks = LockSet()
        instance = locks.lock_one(Level.INSTANCE, instance_id)
        if review and instance is not None:
            _enter_review(locks, instance, f"{duty}: {item_kind} {item_id} failed with {error_class}", now)
    fields = {
        "item_kind": item_kind,
        "namespace_id": instance.namespace_id if instance else None,
        "instance_id": instance.id if instance else None,
        "error_class": error_class,
        "message": message,
        "last_seen_at": now,
        "resolved_at": None,
    }
    incident = Incident.objects.select_for_update().filter(duty=duty, item_id=item_id).first()
    if incident is None:
        try:
            with transaction.atomic():
                return Incident.objects.create(duty=duty, item_id=item_id, first_seen_at=now, **fields)
        except IntegrityError:  # another runner recorded the same item meanwhile: count this one on it
            incident = Incident.objects.select_for_update().get(duty=duty, item_id=item_id)
    for name, value in fields.items():
        setattr(incident, name, value)
    incident.count += 1
    incident.save()
    return incident


def _enter_review(locks: LockSet, instance: WorkflowInstance, reason: str, now) -> None:
    gate = locks.lock_one(Level.GATE, instance.id)
    if gate is None:
        return
    before = instance.state
    instance_enter_review(
        instance=instance,
        gate=gate,
        reason=f"the background set an item aside: {reason}",
        cause=ReviewCause.QUARANTINED_INPUT,
        now=now,
    )
    if instance.state != before:
        touch(instance, now)


def incidents_open() -> QuerySet:
    """The open incidents, the most recently seen first."""
    return Incident.objects.filter(resolved_at__isnull=True).order_by("-last_seen_at")


def incident_line(incident: Incident) -> str:
    """One incident as the commands print it: id, duty, item, instance, error class, count and last seen; never
    the message, which may quote client data."""
    return (
        f"{incident.id} {incident.duty} {incident.item_kind} {incident.item_id}"
        f" instance={incident.instance_id or '-'} {incident.error_class} count={incident.count}"
        f" last_seen={incident.last_seen_at.isoformat()}"
    )


def incidents_resolve(*, ids: list[str]) -> int:
    """Close open incidents (after their cause was fixed): their duties try the items again on the next pass.

    Returns how many were open. An item that fails again reopens its incident and counts once more.
    """
    return Incident.objects.filter(pk__in=ids, resolved_at__isnull=True).update(resolved_at=clock.now())
