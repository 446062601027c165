"""Outgoing webhooks: the notifier finds new events in the rows the engine and the console already write, queues
one delivery per subscribed webhook, and sends the due ones signed, retrying with a growing delay.

Events are read, never emitted by the transactions that make them: the failing transaction keeps its one
signature statement, and a receiver that hangs delays only the notifier (``weave_notify``), never the engine.
Each source is read by an index in (time, id) order from a watermark (``NotifyWatermark``), LAG behind the
clock so that a row committed late by a slow transaction is still ahead of it; the delivery's unique
(webhook, event, key) makes a re-read or a second notifier harmless. A new watermark starts at the clock:
enabling a webhook never replays history.

Signing: ``X-Weave-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the webhook's secret>``.
"""

import datetime as dt
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from core import clock
from core.ids import new_id
from core.times import format_time
from history.models import (
    Campaign,
    Decision,
    DecisionState,
    DeliveryState,
    FailureSignature,
    InstanceState,
    Namespace,
    NotifyWatermark,
    Proposal,
    ProposalState,
    RepairCheck,
    RepairVerdict,
    ReviewAttention,
    Stall,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WorkflowDefinition,
    WorkflowInstance,
)

log = logging.getLogger("weave.notify")

BATCH = 500
# How far behind the clock a source is read: longer than a transaction that writes an event's row takes.
LAG = dt.timedelta(seconds=10)
# A claimed delivery is not due again for this long: longer than one send may take (TIMEOUT).
CLAIM = dt.timedelta(seconds=60)
TIMEOUT = httpx.Timeout(5.0)
SENDS_PER_PASS = 50


@dataclass(frozen=True)
class Event:
    kind: str
    key: str
    namespace_id: str
    occurred_at: dt.datetime
    data: dict
    # What tells apart two occurrences of an event of one row (a campaign halting again once resumed).
    occurrence: str = ""

    @property
    def delivery_key(self) -> str:
        return f"{self.key}@{self.occurrence}" if self.occurrence else self.key


def _definitions(ids: Iterable[str]) -> dict[str, dict]:
    rows = WorkflowDefinition.objects.filter(pk__in=set(ids)).values_list("id", "name", "version")
    return {i: {"id": i, "name": name, "version": version} for i, name, version in rows}


def _instances(ids: Iterable[str]) -> dict[str, dict]:
    rows = WorkflowInstance.objects.filter(pk__in=set(ids)).values_list("id", "business_key", "definition_id")
    definitions = _definitions(definition_id for _, _, definition_id in rows)
    return {i: {"id": i, "business_key": key, "definition": definitions[d]} for i, key, d in rows}


def _after(rows, field: str, since: dt.datetime, last_id: str, upto: dt.datetime, key: str = "id"):
    """``rows`` past the keyset (since, last_id) up to ``upto``, in (time, id) order, one batch."""
    past = Q(**{f"{field}__gt": since}) | Q(**{field: since, f"{key}__gt": last_id})
    return rows.filter(past, **{f"{field}__lte": upto}).order_by(field, key)[:BATCH]


def _new_signatures(since, last_id, upto) -> list[Event]:
    rows = list(_after(FailureSignature.objects.all(), "first_seen", since, last_id, upto))
    definitions = _definitions(row.definition_id for row in rows)
    return [
        Event(
            WebhookEvent.SIGNATURE_NEW,
            row.id,
            row.namespace_id,
            row.first_seen,
            {
                "signature": {
                    "id": row.id,
                    "definition": definitions[row.definition_id],
                    "step_key": row.step_key,
                    "review_cause": row.review_cause,
                    "pattern": row.pattern,
                    "sample": row.sample,
                    "first_seen": format_time(row.first_seen),
                }
            },
        )
        for row in rows
    ]


def _stalls(since, last_id, upto) -> list[Event]:
    rows = list(_after(Stall.objects.all(), "marked_at", since, last_id, upto))
    instances = _instances(row.instance_id for row in rows)
    return [
        Event(
            WebhookEvent.INSTANCE_STALLED,
            row.id,
            row.namespace_id,
            row.marked_at,
            {
                "workflow": instances[row.instance_id],
                "reason": row.reason,
                "detail": row.detail,
                "since": format_time(row.since),
            },
        )
        for row in rows
        if row.instance_id in instances
    ]


def _sla_breaches(since, last_id, upto) -> list[Event]:
    """Instances whose review_since + their definition's review_sla_seconds falls in the window: one range read
    of the review index per definition that declares an SLA. The key holds the review's start, so a later
    review of the same instance breaches anew."""
    events = []
    slas = WorkflowDefinition.objects.filter(spec__has_key="review_sla_seconds")
    for definition_id, namespace_id, spec in slas.values_list("id", "namespace_id", "spec"):
        sla = dt.timedelta(seconds=int(spec["review_sla_seconds"]))
        rows = WorkflowInstance.objects.filter(
            namespace_id=namespace_id, definition_id=definition_id, state=InstanceState.NEEDS_REVIEW
        )
        # Time alone orders this source (its keys are not instance ids): a re-read at the watermark is deduplicated.
        rows = _after(rows, "review_since", since - sla, "", upto - sla).values_list(
            "id", "review_since", "review_cause", "review_step_key"
        )
        for instance_id, review_since, cause, step_key in rows:
            data = {"review_cause": cause, "review_step_key": step_key, "review_since": format_time(review_since)}
            data["sla_seconds"] = int(sla.total_seconds())
            events.append(Event(WebhookEvent.REVIEW_SLA_BREACHED, instance_id, namespace_id, review_since + sla, data))
    instances = _instances(event.key for event in events)
    for event in events:
        event.data["workflow"] = instances[event.key]
    events.sort(key=lambda event: (event.occurred_at, event.key))
    return [
        Event(e.kind, f"{e.key}@{e.data['review_since']}", e.namespace_id, e.occurred_at, e.data)
        for e in events[:BATCH]
    ]


def _approvals(since, last_id, upto) -> list[Event]:
    """Proposals and decisions still awaiting a second person, by their creation."""
    now = clock.now()
    rows = []
    for model, state in ((Proposal, ProposalState.PENDING), (Decision, DecisionState.PROPOSED)):
        rows += _after(model.objects.filter(state=state, expires_at__gt=now), "created_at", since, last_id, upto)
    rows = sorted(rows, key=lambda row: (row.created_at, row.id))[:BATCH]
    instances = _instances(row.workflow_id for row in rows)
    events = []
    for row in rows:
        operation = isinstance(row, Proposal)
        data = {
            "kind": "operation" if operation else "decision",
            "id": row.id,
            "what": row.operation if operation else row.kind,
            "workflow": instances.get(row.workflow_id),
            "reason": row.reason,
            "proposed_by": row.proposed_by if operation else row.actor_id,
            "expires_at": format_time(row.expires_at),
        }
        events.append(Event(WebhookEvent.APPROVAL_REQUESTED, row.id, row.namespace_id, row.created_at, data))
    return events


def _campaign_halts(since, last_id, upto) -> list[Event]:
    return [
        Event(
            WebhookEvent.CAMPAIGN_HALTED,
            row.id,
            row.namespace_id,
            row.halted_at,
            {
                "campaign": {"id": row.id, "title": row.title, "owner": row.owner, "total": row.total},
                "halted_reason": row.halted_reason,
                "halted_at": format_time(row.halted_at),
            },
            occurrence=format_time(row.halted_at),
        )
        for row in _after(Campaign.objects.exclude(halted_at=None), "halted_at", since, last_id, upto)
    ]


def _ineffective_repairs(since, last_id, upto) -> list[Event]:
    """Repairs judged ineffective or regressed, with who was on the review they lifted (its last assignee)."""
    failed = (RepairVerdict.INEFFECTIVE, RepairVerdict.REGRESSED)
    rows = list(_after(RepairCheck.objects.filter(verdict__in=failed), "judged_at", since, last_id, upto))
    instances = _instances(row.instance_id for row in rows)
    assignees = dict(
        ReviewAttention.objects.filter(instance_id__in=[row.instance_id for row in rows]).values_list(
            "instance_id", "assignee"
        )
    )
    return [
        Event(
            WebhookEvent.REPAIR_INEFFECTIVE,
            row.id,
            row.namespace_id,
            row.judged_at,
            {
                "workflow": instances[row.instance_id],
                "step_key": row.step_key,
                "review_cause": row.cause,
                "verdict": row.verdict,
                "detail": row.detail,
                "repaired_at": format_time(row.made_at),
                "assignee": assignees.get(row.instance_id) or None,
            },
        )
        for row in rows
        if row.instance_id in instances
    ]


SOURCES: dict[str, Callable[[dt.datetime, str, dt.datetime], list[Event]]] = {
    WebhookEvent.SIGNATURE_NEW: _new_signatures,
    WebhookEvent.REVIEW_SLA_BREACHED: _sla_breaches,
    WebhookEvent.INSTANCE_STALLED: _stalls,
    WebhookEvent.APPROVAL_REQUESTED: _approvals,
    WebhookEvent.CAMPAIGN_HALTED: _campaign_halts,
    WebhookEvent.REPAIR_INEFFECTIVE: _ineffective_repairs,
}


def body_of(delivery_id: str, event: Event, namespace: str) -> str:
    document = {
        "id": delivery_id,
        "event": str(event.kind),
        "namespace": namespace,
        "occurred_at": format_time(event.occurred_at),
        "data": event.data,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def notify_queue() -> int:
    """Read each source past its watermark, queue a delivery per subscribed webhook; the deliveries queued."""
    upto = clock.now() - LAG
    webhooks = list(Webhook.objects.filter(enabled=True).values_list("id", "namespace_id", "events"))
    names = dict(Namespace.objects.values_list("id", "name"))
    queued = 0
    for kind, read in SOURCES.items():
        mark = NotifyWatermark.objects.filter(pk=kind).first()
        if mark is None:
            NotifyWatermark.objects.get_or_create(event=kind, defaults={"position": upto})
            continue
        # An event no enabled webhook wants is not read at all: its watermark just moves on.
        events = read(mark.position, mark.last_id, upto) if any(kind in w for _, _, w in webhooks) else []
        new = [
            WebhookDelivery(
                id=(delivery_id := new_id()),
                webhook_id=webhook_id,
                event=kind,
                event_key=event.delivery_key,
                body=body_of(delivery_id, event, names.get(event.namespace_id, "")),
            )
            for event in events
            for webhook_id, namespace_id, wanted in webhooks
            if namespace_id == event.namespace_id and kind in wanted
        ]
        with transaction.atomic():
            queued += len(WebhookDelivery.objects.bulk_create(new, ignore_conflicts=True))
            # A full batch stops at its last event; a short one read the window whole.
            last = events[-1] if len(events) >= BATCH else None
            position, last_id = (last.occurred_at, last.key) if last else (upto, "")
            NotifyWatermark.objects.filter(pk=kind).update(position=position, last_id=last_id)
    return queued


def signature_header(secret: str, body: str, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def retry_delay(attempts: int) -> dt.timedelta:
    """The wait after the n-th failed attempt: the base, doubled each time, at most an hour."""
    seconds = settings.WEAVE_WEBHOOK_RETRY_SECONDS * 2 ** (attempts - 1)
    return dt.timedelta(seconds=min(seconds, 3600))


def deliver(delivery: WebhookDelivery, webhook: Webhook, client: httpx.Client) -> bool:
    """POST one delivery and record the answer: DELIVERED on a 2xx, else due again after ``retry_delay``, or FAILED
    after the last attempt. Whether it was delivered."""
    # The receiver checks the timestamp against its own clock: the wall clock, not the engine's movable one.
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "weave-notify",
        "X-Weave-Event": delivery.event,
        "X-Weave-Delivery": delivery.id,
        "X-Weave-Signature": signature_header(webhook.secret, delivery.body, timestamp),
    }
    status, error = None, ""
    try:
        response = client.post(webhook.url, content=delivery.body.encode(), headers=headers)
        status = response.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}: {response.text[:200]}"
    except httpx.HTTPError as failure:
        error = f"{failure.__class__.__name__}: {failure}"
    attempts = delivery.attempts + 1
    fields = {"attempts": attempts, "last_status": status, "last_error": error[:512]}
    if not error:
        fields.update(state=DeliveryState.DELIVERED, delivered_at=clock.now())
    elif attempts >= settings.WEAVE_WEBHOOK_ATTEMPTS:
        fields["state"] = DeliveryState.FAILED
    else:
        fields["next_attempt_at"] = clock.now() + retry_delay(attempts)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**fields)
    if error:
        log.warning("webhook %s: delivery %s attempt %d failed: %s", webhook.name, delivery.id, attempts, error)
    return not error


def notify_send() -> int:
    """Send the due deliveries of enabled webhooks, oldest due first; the deliveries attempted.

    Each is claimed first (its due time moved by CLAIM, on the condition that nobody moved it): two notifiers
    never send one at once, and a notifier killed during a send leaves it due again after CLAIM."""
    now = clock.now()
    due = WebhookDelivery.objects.filter(
        state=DeliveryState.PENDING, next_attempt_at__lte=now, webhook__enabled=True
    ).select_related("webhook")
    attempted = 0
    with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
        for delivery in due.order_by("next_attempt_at")[:SENDS_PER_PASS]:
            claim = WebhookDelivery.objects.filter(
                pk=delivery.pk, state=DeliveryState.PENDING, next_attempt_at=delivery.next_attempt_at
            )
            if claim.update(next_attempt_at=now + CLAIM):
                deliver(delivery, delivery.webhook, client)
                attempted += 1
    return attempted


def webhook_ping(webhook: Webhook) -> WebhookDelivery:
    """Send a test event to ``webhook`` now (the console's test button); the delivery, as the answer left it.
    A failed ping is retried like any delivery."""
    event = Event(WebhookEvent.PING, new_id(), webhook.namespace_id, clock.now(), {"webhook": webhook.name})
    delivery = WebhookDelivery(id=new_id(), webhook=webhook, event=WebhookEvent.PING, event_key=event.key)
    delivery.body = body_of(delivery.id, event, Namespace.objects.get(pk=webhook.namespace_id).name)
    delivery.save(force_insert=True)
    with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
        deliver(delivery, webhook, client)
    delivery.refresh_from_db()
    return delivery
