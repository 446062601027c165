from django.db import models

from history.models.base import _id_field, _ref


class FailureSignature(models.Model):
    """What made instances enter review, apart from the instances: the error's pattern (``core.signatures``) where
    it happened — namespace, definition, step, review cause — with its first and last arrival and how many.

    Written by one upsert in the transaction that puts an instance in review (``history.signatures``); the
    instance names it (``WorkflowInstance.failure_signature``) while it is in review.
    """

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    namespace = _ref("Namespace", db_index=False)
    definition = _ref("WorkflowDefinition", db_index=False)
    step_key = models.CharField(max_length=64, blank=True)
    review_cause = models.CharField(max_length=32)
    pattern = models.CharField(max_length=512)
    # The review reason of its first arrival, as the engine wrote it.
    sample = models.CharField(max_length=1024)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    count = models.PositiveBigIntegerField(default=1)
    # Of those, the arrivals of instances whose first failure was another signature: a consequence of that one
    # (a repair that led on to this), not a cause of its own.
    knock_on = models.PositiveBigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "last_seen", "id"], name="signature_ns_last_seen"),
            # The notifier reads the new signatures in the order they appeared (engine.notify).
            models.Index(fields=["first_seen", "id"], name="signature_first_seen"),
        ]

    def __str__(self) -> str:
        return f"{self.review_cause} · {self.step_key or 'instance'} · {self.pattern[:60]}"


class StallReason(models.TextChoices):
    """Why the watchdog (``engine.watchdog``) calls an instance that is not in review stuck."""

    PAUSED_TOO_LONG = "paused_too_long", "paused longer than the bound"
    INBOX_WAITING = "inbox_waiting", "an inbox record of it waits longer than the bound"
    CONTINUATION_WAITING = "continuation_waiting", "a continuation of it waits longer than the bound"
    RETRYING_SAME_FAILURE = "retrying_same_failure", "a task of it failed the same way on its last attempts"
    UNCLAIMED = "unclaimed", "a task of it waits on a queue no worker is taking from"
    SIGNAL_OVERDUE = "signal_overdue", "a signal it waits for is later than its definition expects"


class Stall(models.Model):
    """An instance the watchdog found stuck without being in review: a mark beside the engine's rows, never a
    change of them. It goes when the instance moves (its revision) or the reason no longer holds."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    instance = models.OneToOneField(
        "WorkflowInstance", on_delete=models.DO_NOTHING, db_constraint=False, related_name="stall"
    )
    reason = models.CharField(max_length=32, choices=StallReason.choices)
    detail = models.CharField(max_length=512)
    # Since when the reason holds (the pause, the oldest record), and the instance's revision when it was marked.
    since = models.DateTimeField()
    revision = models.PositiveBigIntegerField()
    marked_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "reason", "since", "id"], name="stall_ns_reason_since"),
            models.Index(fields=["marked_at", "id"], name="stall_marked"),
        ]

    def __str__(self) -> str:
        return f"{self.reason} since {self.since:%Y-%m-%d %H:%M} UTC"
