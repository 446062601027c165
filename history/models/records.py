"""What arrives and what is kept while an instance runs: the task result stream, the inbox, poll rounds,
waits and signals, continuations for the runner, incidents set aside by the background, and the
instance's timeline (``InstanceEvent``), with the enums of their kinds, states and dispositions.
"""

from django.db import models

from core import clock
from history.models.base import Revision, StateFollowed, _exact_json, _id_field, _ref


class ResultKind(models.TextChoices):
    RESULT = "RESULT"
    UNKNOWN = "UNKNOWN"
    REVIEWED = "REVIEWED"


class ResultEvent(models.Model):
    """The task result stream: one ordered sequence per task."""

    id = _id_field()
    task = _ref("Task", db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=ResultKind.choices)
    outcome = models.CharField(max_length=16, blank=True)
    result = _exact_json()
    task_revision = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=clock.now)
    # Late evidence: a report of an attempt that had lost its lease, or of a task whose activation
    # is no longer current. It is kept for the operator and changes no state.
    late = models.BooleanField(default=False)
    attempt = _ref("Attempt", null=True, db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="result_event_task_seq")]
        # The console's result event list of one kind (the unknown outcomes).
        indexes = [models.Index(fields=["kind"], name="result_event_kind")]


class InboxSource(models.TextChoices):
    RESULT_EVENT = "RESULT_EVENT"
    SIGNAL = "SIGNAL"


class InboxState(models.TextChoices):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"
    QUARANTINED = "QUARANTINED"


class Disposition(models.TextChoices):
    APPLIED = "APPLIED"
    LATE_RECORDED = "LATE_RECORDED"
    DUPLICATE = "DUPLICATE"
    BUFFERED = "BUFFERED"
    REJECTED = "REJECTED"
    CONTRACT_VIOLATION = "CONTRACT_VIOLATION"
    EXPIRED = "EXPIRED"


class InboxRecord(StateFollowed):
    id = _id_field()
    instance = _ref("WorkflowInstance", db_index=False)
    source_kind = models.CharField(max_length=16, choices=InboxSource.choices)
    source_id = models.CharField(max_length=32)
    task = _ref("Task", null=True, db_index=False)
    activation = _ref("Activation", null=True, db_index=False)
    signal = _ref("Signal", null=True, db_index=False)
    # The row ``source_id`` names, as either kind: no column of its own, so the consumer reads it with the record
    # in one statement (``select_related``). ``source_kind`` says which applies; the other finds nothing.
    source_event = models.ForeignObject(
        "ResultEvent", models.DO_NOTHING, from_fields=["source_id"], to_fields=["id"], null=True, related_name="+"
    )
    source_signal = models.ForeignObject(
        "Signal", models.DO_NOTHING, from_fields=["source_id"], to_fields=["id"], null=True, related_name="+"
    )
    state = models.CharField(max_length=16, choices=InboxState.choices, default=InboxState.PENDING)
    disposition = models.CharField(max_length=24, choices=Disposition.choices, blank=True)
    quarantine_reason = models.CharField(max_length=1024, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source_kind", "source_id"], name="inbox_source")]
        indexes = [
            models.Index(fields=["instance", "state", "created_at"], name="inbox_instance_state"),
            models.Index(fields=["state", "created_at"], name="inbox_state_created"),
        ]


class PollRound(models.Model):
    """One business round of a POLL activation and its query task."""

    id = _id_field()
    activation = _ref("Activation", db_index=False)
    instance = _ref("WorkflowInstance", db_index=False)
    round = models.PositiveIntegerField()
    task = _ref("Task", db_index=False)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [models.Index(fields=["activation", "round", "id"], name="poll_round_activation_round")]


class WaitKind(models.TextChoices):
    SIGNAL = "SIGNAL"
    TIMER = "TIMER"
    POLL_FINAL_SIGNAL = "POLL_FINAL_SIGNAL"


class WaitState(models.TextChoices):
    WAITING = "WAITING"
    SATISFIED = "SATISFIED"
    EXPIRED = "EXPIRED"
    SUPERSEDED = "SUPERSEDED"
    CANCELLED = "CANCELLED"
    NEEDS_REVIEW = "NEEDS_REVIEW"


class Wait(StateFollowed):
    id = _id_field()
    instance = _ref("WorkflowInstance", db_index=False)
    step = _ref("Step", db_index=False)
    activation = _ref("Activation", db_index=False)
    kind = models.CharField(max_length=20, choices=WaitKind.choices)
    generation = models.PositiveIntegerField(default=1)
    signal_name = models.CharField(max_length=128, blank=True)
    payload_version = models.CharField(max_length=64, blank=True)
    correlation_key = models.CharField(max_length=256, blank=True)
    deadline_at = models.DateTimeField()
    fire_at = models.DateTimeField(null=True, blank=True)
    # When the definition expects the signal (``expected_seconds``), if it says: past it, the watchdog marks the
    # instance; the engine waits on until the deadline.
    expected_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=WaitState.choices, default=WaitState.WAITING)
    winner_signal = _ref("Signal", null=True, db_index=False)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [
            models.Index(fields=["step", "state"], name="wait_step_state"),
            models.Index(fields=["state", "deadline_at"], name="wait_state_deadline"),
            # The watchdog's overdue signals (engine.watchdog): a short range of the waiting ones.
            models.Index(fields=["state", "expected_at"], name="wait_state_expected"),
            # The runner's due timers (engine.runner): the waiting ones past fire_at, not every waiting wait.
            models.Index(fields=["state", "fire_at"], name="wait_state_fire"),
        ]


class SignalState(models.TextChoices):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    QUARANTINED = "QUARANTINED"


class Signal(StateFollowed):
    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    revision = Revision()
    name = models.CharField(max_length=128)
    payload_version = models.CharField(max_length=64, blank=True)
    payload = _exact_json(null=False)
    correlation_key = models.CharField(max_length=256, blank=True)
    target_step_key = models.CharField(max_length=64)
    # 0 only on legacy rows accepted before targets carried a sequence.
    target_activation_sequence = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=SignalState.choices, default=SignalState.PENDING)
    disposition = models.CharField(max_length=24, choices=Disposition.choices, blank=True)
    accepted_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    actor_id = models.CharField(max_length=32)
    evidence_ref = models.CharField(max_length=512, blank=True)
    consumed_wait = _ref("Wait", null=True, db_index=False)

    class Meta:
        indexes = [
            models.Index(fields=["workflow", "target_step_key", "state"], name="signal_target_state"),
            # workflow_signal_history: the signal history list's index, added alone by migration 0002.
            models.Index(fields=["namespace", "workflow", "accepted_at", "id"], name="workflow_signal_history"),
            # The runner's signal expiry (engine.runner): the pending ones past expires_at.
            models.Index(fields=["state", "expires_at"], name="signal_state_expires"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class ContinuationState(models.TextChoices):
    PENDING = "PENDING"
    APPLIED = "APPLIED"


class Continuation(models.Model):
    """A request for the runner to advance the graph from a step (``$root``: the whole instance)."""

    id = _id_field()
    instance = _ref("WorkflowInstance", db_index=False)
    step_key = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    state = models.CharField(max_length=16, choices=ContinuationState.choices, default=ContinuationState.PENDING)
    created_at = models.DateTimeField(default=clock.now)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "created_at"], name="continuation_state_created")]


class Incident(models.Model):
    """A background item that failed with a non-database error, set aside so the rest goes on.

    One row per (duty, item): a repeat raises ``count`` and ``last_seen_at``. While a row is
    open the duty skips its item; an operator closes it (``resolved_at``) after fixing the cause.
    """

    id = _id_field()
    duty = models.CharField(max_length=32)
    item_kind = models.CharField(max_length=32)
    item_id = models.CharField(max_length=32)
    namespace = _ref("Namespace", null=True, db_index=False)
    instance = _ref("WorkflowInstance", null=True, db_index=False)
    error_class = models.CharField(max_length=128)
    message = models.CharField(max_length=1024)
    count = models.PositiveIntegerField(default=1)
    first_seen_at = models.DateTimeField(default=clock.now)
    last_seen_at = models.DateTimeField(default=clock.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["duty", "item_id"], name="incident_duty_item")]
        indexes = [
            models.Index(fields=["resolved_at", "last_seen_at"], name="incident_open"),
            models.Index(fields=["instance", "last_seen_at"], name="incident_instance"),
        ]


class InstanceEvent(models.Model):
    """The instance's timeline: one append-only row per change of the instance or of a row it owns.

    ``sequence`` runs 1, 2, 3… per instance without gaps; it is taken under the instance's row lock,
    in the transaction of the change. ``kind`` is ``<subject_type>.created`` or ``<subject_type>.state``;
    ``before``/``after`` are the subject's state (blank before a creation). ``detail`` adds the one
    code that explains the change: the review cause, the inbox disposition, the audit action, the
    result kind. Rows written for instances older than the timeline are ``reconstructed``.
    """

    id = _id_field()
    instance = _ref("WorkflowInstance", db_index=False)
    sequence = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=32)
    subject_type = models.CharField(max_length=16)
    subject_id = models.CharField(max_length=32)
    step_key = models.CharField(max_length=64, blank=True)
    before = models.CharField(max_length=24, blank=True)
    after = models.CharField(max_length=24, blank=True)
    detail = models.CharField(max_length=64, blank=True)
    actor_kind = models.CharField(max_length=16)
    actor_id = models.CharField(max_length=128, blank=True)
    operation_id = models.CharField(max_length=32, blank=True)
    audit_id = models.CharField(max_length=32, blank=True)
    # The recovery operation that wrote it (retry-step, resolve-step, …): a state a person produced, not the
    # engine by itself. Blank otherwise; the database's default too, for rows written in bulk.
    repair = models.CharField(max_length=32, blank=True, default="", db_default="")
    reconstructed = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "sequence"], name="event_instance_sequence")]
        indexes = [
            models.Index(fields=["instance", "kind", "sequence"], name="event_instance_kind"),
            models.Index(fields=["instance", "step_key", "sequence"], name="event_instance_step"),
            # kind and after ride along so that a row's latest state event is read from the index alone.
            models.Index(fields=["instance", "subject_id", "sequence", "kind", "after"], name="event_instance_subject"),
        ]
