"""Outgoing webhooks: what a namespace subscribes to, every delivery with its attempts, and how far the notifier
has read each source (``engine.notify``)."""

from django.db import models

from core import clock
from history.models.base import _id_field, _ref


class WebhookEvent(models.TextChoices):
    """What a webhook can be told; the payload of each is in the API reference (docs/api.md, "Webhooks")."""

    SIGNATURE_NEW = "signature.new", "a new failure signature"
    REVIEW_SLA_BREACHED = "review.sla_breached", "an instance waits in review past its definition's SLA"
    INSTANCE_STALLED = "instance.stalled", "the watchdog marks an instance stalled"
    APPROVAL_REQUESTED = "approval.requested", "a proposal or decision awaits a second person's approval"
    CAMPAIGN_HALTED = "campaign.halted", "a repair campaign halted itself: too many items refused or failed"
    REPAIR_INEFFECTIVE = "repair.ineffective", "a repair did not work: ineffective or regressed"
    PING = "ping", "a test sent from the console"


class Webhook(models.Model):
    """A namespace's receiver: an HTTPS (or HTTP) URL told of the chosen events, each body signed with ``secret``."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    url = models.URLField(max_length=1024, help_text="where the events are POSTed as JSON")
    # The events it is told of (WebhookEvent values, ping aside: a test is sent on request).
    events = models.JSONField(default=list)
    # The HMAC-SHA256 key of the X-Weave-Signature header; the receiver holds the same. Never shown after creation.
    secret = models.CharField(max_length=128)
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="webhook_namespace_name")]

    def __str__(self) -> str:
        return self.name


class DeliveryState(models.TextChoices):
    PENDING = "PENDING"  # due at next_attempt_at (its first attempt or a retry)
    DELIVERED = "DELIVERED"  # the receiver answered 2xx
    FAILED = "FAILED"  # every attempt failed: the log keeps the last answer or error


class WebhookDelivery(models.Model):
    """One event for one webhook: its exact body, its attempts and the last answer.

    ``event_key`` names the event itself (the signature, the instance and its review, the mark), so two notifiers
    reading the same source never queue it twice; a receiver deduplicates on the delivery id (X-Weave-Delivery):
    a notifier killed between the send and its record sends again.
    """

    id = _id_field()
    webhook = _ref("Webhook", db_index=False, related_name="deliveries")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    event_key = models.CharField(max_length=128)
    body = models.TextField()
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=clock.now)
    last_status = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=512, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["webhook", "event", "event_key"], name="webhook_delivery_event")]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="webhook_delivery_due"),
            models.Index(fields=["webhook", "created_at"], name="webhook_delivery_log"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook_id} ({self.state})"


class NotifyWatermark(models.Model):
    """How far the notifier has read one event's source: the (time, id) of the last row read."""

    event = models.CharField(primary_key=True, max_length=32, choices=WebhookEvent.choices)
    position = models.DateTimeField()
    last_id = models.CharField(max_length=128, blank=True)
