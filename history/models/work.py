"""The work the engine runs: the fixed workflow definitions, and each instance with its gate, steps,
activations, tasks and attempts, the state enums of each, the review causes and ``TERMINAL_TASK_STATES``.
"""

import datetime as dt

from django.db import models

from core import clock, exactjson
from history.models.base import Revision, StateFollowed, _exact_json, _id_field, _ref


class WorkflowDefinition(models.Model):
    """A fixed, versioned step graph. Immutable once created."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    # Contracts judge numbers exactly: a number with a fraction or exponent comes back as a Decimal (never a
    # float) and is written as its exact text.
    spec = models.JSONField(encoder=exactjson.ExactEncoder, decoder=exactjson.ExactDecoder)
    # Sorted names of every queue the steps reference; access checks use it.
    queues = models.JSONField(default=list)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name", "version"], name="definition_ns_name_version")
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    def step_spec(self, key: str) -> dict | None:
        for step in self.spec["steps"]:
            if step["key"] == key:
                return step
        return None


class InstanceState(models.TextChoices):
    RUNNING = "RUNNING"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StopKind(models.TextChoices):
    CANCEL = "CANCEL"
    FAIL = "FAIL"


class ReviewCause(models.TextChoices):
    """Why an instance entered NEEDS_REVIEW: one code per engine transition into review."""

    TASK_OUTCOME_UNKNOWN = "task_outcome_unknown", "a task's lease expired: its outcome is unknown"
    TASK_FAILED_BUDGET_LEFT = "task_failed_budget_left", "a task failed; the step has attempts left"
    TASK_BUDGET_EXHAUSTED = "task_budget_exhausted", "a task failed; the step's attempts are used up"
    RESULT_CONTRACT_VIOLATION = "result_contract_violation", "a task's result breaks the step's contract"
    POLL_REQUEST_FAILED = "poll_request_failed", "a POLL query task failed"
    POLL_UNCLASSIFIED = "poll_unclassified", "a POLL answer matches no classification"
    POLL_FAILED = "poll_failed", "a POLL answer was classified FAILED"
    POLL_EXHAUSTED = "poll_exhausted", "a POLL step is still PENDING with its rounds used up"
    POLL_DEADLINE_PASSED = "poll_deadline_passed", "a POLL step is still PENDING past its poll deadline"
    SIGNAL_CONTRACT_VIOLATION = "signal_contract_violation", "a signal's payload breaks the step's contract"
    WAIT_EXPIRED = "wait_expired", "a signal wait passed its deadline"
    TIMER_LATE = "timer_late", "a timer was first seen too late to fire"
    QUARANTINED_INPUT = "quarantined_input", "the background set an item of the instance aside"
    CORRUPT_INBOX_RECORD = "corrupt_inbox_record", "an inbox record's sources disagree"
    # Only rows that entered review before causes were recorded and whose text matched no cause.
    UNCLASSIFIED = "unclassified", "entered review before causes were recorded"


# Before any reading of the clock: a CANCELLING instance is due to the runner at once.
RUNNER_DUE_ALWAYS = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class WorkflowInstance(StateFollowed):
    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    definition = _ref("WorkflowDefinition")
    business_key = models.CharField(max_length=256, blank=True)
    state = models.CharField(max_length=16, choices=InstanceState.choices, default=InstanceState.RUNNING)
    paused = models.BooleanField(default=False)
    stop_kind = models.CharField(max_length=8, choices=StopKind.choices, null=True, blank=True)
    stop_reason = models.CharField(max_length=1024, blank=True)
    revision = Revision()
    control_revision = Revision()
    input = _exact_json(null=False)
    output = _exact_json()
    deadline_at = models.DateTimeField(null=True, blank=True)
    review_reason = models.CharField(max_length=1024, blank=True)
    # Set together on entering NEEDS_REVIEW and cleared on leaving it; the step is blank when the
    # cause concerns the whole instance (a corrupt record, an item set aside).
    review_cause = models.CharField(max_length=32, choices=ReviewCause.choices, blank=True)
    review_step_key = models.CharField(max_length=64, blank=True)
    review_since = models.DateTimeField(null=True, blank=True)
    # What made it enter review (``history.signatures``), set and cleared with the cause.
    failure_signature = _ref("FailureSignature", null=True, db_index=False)
    # The first it ever entered review with, kept once it leaves: the root of its chain of failures. A later
    # signature that is another is a knock-on (``FailureSignature.knock_on``).
    root_signature = _ref("FailureSignature", null=True, db_index=False, related_name="+")
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # From when the runner has work on the instance: its deadline while RUNNING (``pass_instance_deadlines``),
    # always while CANCELLING (``pass_stop_settlement``), never otherwise. Its index makes both duties one range
    # of what is due; an index led by the state changed MariaDB's plans of the review queue.
    runner_due_at = models.GeneratedField(
        expression=models.Case(
            models.When(state=InstanceState.RUNNING, then=models.F("deadline_at")),
            models.When(state=InstanceState.CANCELLING, then=models.Value(RUNNER_DUE_ALWAYS)),
        ),
        output_field=models.DateTimeField(null=True),
        db_persist=True,
    )

    class Meta:
        indexes = [
            # Revision last: the review queue's version (count, sum of revisions, latest change) from the index alone.
            models.Index(fields=["namespace", "state", "updated_at", "revision"], name="instance_ns_state_updated"),
            models.Index(fields=["namespace", "created_at", "id"], name="instance_ns_created"),
            models.Index(fields=["namespace", "updated_at"], name="instance_ns_updated"),
            # The instance query: an equality filter, then the order key, then id, so that a page is
            # one ordered range scan per value. Filters without an index of their own (the time
            # ranges, a prefix) ride on the scan of another filter or of the order.
            models.Index(fields=["namespace", "state", "created_at", "id"], name="instance_ns_state_created"),
            models.Index(fields=["namespace", "definition", "updated_at", "id"], name="instance_ns_def_updated"),
            models.Index(fields=["namespace", "definition", "created_at", "id"], name="instance_ns_def_created"),
            models.Index(fields=["namespace", "paused", "updated_at", "id"], name="instance_ns_paused_updated"),
            models.Index(fields=["namespace", "stop_kind", "updated_at", "id"], name="instance_ns_stop_updated"),
            models.Index(fields=["namespace", "review_since", "id"], name="instance_ns_review_since"),
            # The review queue, the longest waiting first: a range from its first row. On the index above MariaDB
            # walks every instance of the namespace outside review to reach them (an index condition, not a range).
            models.Index(fields=["namespace", "state", "review_since", "id"], name="instance_ns_state_since"),
            models.Index(fields=["namespace", "review_cause", "review_since", "id"], name="instance_ns_cause_since"),
            models.Index(
                fields=["namespace", "failure_signature", "review_since", "id"], name="instance_ns_signature_since"
            ),
            # Exact business key and prefix ranges.
            models.Index(fields=["namespace", "business_key", "id"], name="instance_ns_business_key"),
            # The review summary counts from this index alone.
            models.Index(
                fields=["namespace", "state", "definition", "review_cause"], name="instance_ns_review_summary"
            ),
            models.Index(fields=["runner_due_at"], name="instance_runner_due"),
        ]
        # Admin permissions that map to API scopes (core.identity.identity_of_user).
        permissions = [
            ("recover_workflowinstance", "Can run the recovery operations (workflows:recover)"),
            ("control_workflowinstance", "Can pause, resume and cancel (workflows:control)"),
            ("signal_workflowinstance", "Can send signals (workflows:write)"),
            ("audit_workflowinstance", "Can read the audit trail (workflows:audit:read)"),
            ("annotate_workflowinstance", "Can acknowledge, assign and note reviews (workflows:annotate)"),
        ]

    def __str__(self) -> str:
        return self.id


class Gate(models.Model):
    """Open iff the instance is RUNNING and not paused; tasks start only through an open gate."""

    instance = models.OneToOneField(
        "WorkflowInstance",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="gate",
    )
    open = models.BooleanField(default=True)
    revision = Revision()

    class Meta:
        # The console's gate list, open or shut.
        indexes = [models.Index(fields=["open"], name="gate_open")]


class StepKind(models.TextChoices):
    ROOT = "ROOT"
    TASK = "TASK"
    POLL = "POLL"
    SIGNAL = "SIGNAL"
    TIMER = "TIMER"


class StepState(models.TextChoices):
    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    WAITING = "WAITING"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Step(StateFollowed):
    id = _id_field()
    instance = _ref("WorkflowInstance", db_index=False, related_name="steps")
    key = models.CharField(max_length=64)
    kind = models.CharField(max_length=8, choices=StepKind.choices)
    state = models.CharField(max_length=16, choices=StepState.choices, default=StepState.PENDING)
    current_activation = _ref("Activation", null=True, db_index=False)
    revision = Revision()
    output = _exact_json()
    # The latest management conclusion (ResolveStep): conclusion, result digest, operation id.
    resolution = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)
    # Counters kept by each transition that creates an activation, so a check reads the history's size
    # instead of counting it; weave_check compares them with the rows (step_counter_drift).
    activation_count = models.PositiveIntegerField(default=0)
    # TASK steps: the attempts the tasks of the activations before the current one ran (0 otherwise).
    attempts_before = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "key"], name="step_instance_key")]
        # The console's step list by state or kind, newest id first (each index's entries end with the id).
        indexes = [
            models.Index(fields=["state"], name="step_state"),
            models.Index(fields=["kind"], name="step_kind"),
        ]

    def __str__(self) -> str:
        return self.key


class ActivationState(models.TextChoices):
    ACTIVE = "ACTIVE"
    WAITING = "WAITING"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"


class Activation(StateFollowed):
    id = _id_field()
    step = _ref("Step", db_index=False, related_name="activations")
    instance = _ref("WorkflowInstance")
    sequence = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=ActivationState.choices, default=ActivationState.ACTIVE)
    revision = Revision()
    task = _ref("Task", null=True)
    input = _exact_json(null=False)
    output = _exact_json()
    # The outcome a REVIEWED result event carried (ReviewTask): recorded, not a step conclusion.
    verified_outcome = models.CharField(max_length=16, blank=True)
    verified_result = _exact_json()
    resolution = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    latest_start_at = models.DateTimeField(null=True, blank=True)
    # POLL: the business round this activation started at and its frozen limits.
    first_round = models.PositiveIntegerField(null=True, blank=True)
    first_round_attempts_used = models.PositiveIntegerField(null=True, blank=True)
    used_rounds = models.PositiveIntegerField(null=True, blank=True)
    max_rounds = models.PositiveIntegerField(null=True, blank=True)
    attempts_per_round = models.PositiveIntegerField(null=True, blank=True)
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    poll_deadline_at = models.DateTimeField(null=True, blank=True)
    round_deadline_at = models.DateTimeField(null=True, blank=True)
    last_task = _ref("Task", null=True, db_index=False)
    next_round_at = models.DateTimeField(null=True, blank=True)
    last_round_classification = models.CharField(max_length=16, blank=True)
    wait = _ref("Wait", null=True, db_index=False)

    # Every activation of a POLL step has these set; a re-run of the step and a new wait generation keep them.
    POLL_FIELDS = (
        "first_round",
        "first_round_attempts_used",
        "used_rounds",
        "max_rounds",
        "attempts_per_round",
        "interval_seconds",
        "poll_deadline_at",
        "round_deadline_at",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "sequence"], name="activation_step_sequence")]
        indexes = [
            models.Index(fields=["state", "next_round_at"], name="activation_state_next_round"),
            # A step's activations of another instance are an empty range of this index when healthy.
            models.Index(fields=["step", "instance"], name="activation_step_instance"),
            # The console's activation list, the newest first, whole or in one state.
            models.Index(fields=["created_at"], name="activation_created"),
            models.Index(fields=["state", "created_at"], name="activation_state_created"),
        ]

    def __str__(self) -> str:
        return f"{self.step_id}#{self.sequence}"


class TaskState(models.TextChoices):
    QUEUED = "QUEUED"
    LEASED = "LEASED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_TASK_STATES = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)


class Task(StateFollowed):
    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    application = _ref("Application", db_index=False)
    queue = _ref("Queue", db_index=False)
    handler = models.CharField(max_length=128)
    priority = models.IntegerField(default=0)
    input = _exact_json(null=False)
    business_key = models.CharField(max_length=256, blank=True)
    concurrency_key = models.CharField(max_length=256, blank=True)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.QUEUED)
    revision = Revision()
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=1)
    deadline_at = models.DateTimeField(null=True, blank=True)
    latest_start_at = models.DateTimeField(null=True, blank=True)
    # At most one direct successor per task: the unique index enforces it.
    retry_of = models.OneToOneField(
        "self", on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True, related_name="+"
    )
    source_instance = _ref("WorkflowInstance", db_index=False)
    source_activation = _ref("Activation", db_index=False)
    source_round = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True)
    result = _exact_json()
    permit_held = models.BooleanField(default=True)
    review_conclusion = models.CharField(max_length=16, blank=True)
    execution_settled = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)

    # What a retry keeps of the task it retries, besides the application and queue it is charged to.
    FIXED_FIELDS = ("handler", "priority", "input", "business_key", "concurrency_key")

    class Meta:
        indexes = [
            # The claim's order (highest priority, then oldest): a claim reads the head of its queue, not the backlog.
            models.Index(fields=["queue", "state", "-priority", "created_at", "id"], name="task_queue_claim_order"),
            models.Index(fields=["source_activation", "created_at"], name="task_source_activation"),
            # An instance's tasks in one state (those in review) without reading the rest of its history.
            models.Index(fields=["source_instance", "state"], name="task_source_instance_state"),
            models.Index(fields=["namespace", "state", "updated_at"], name="task_ns_state_updated"),
            models.Index(fields=["namespace", "created_at"], name="task_ns_created"),
            # The watchdog's tasks retried many times (engine.watchdog): a short range of the queued ones.
            models.Index(fields=["state", "attempt_count"], name="task_state_attempts"),
            # The runner's task deadlines (engine.runner): the queued ones past either bound, not the whole queue.
            models.Index(fields=["state", "deadline_at"], name="task_state_deadline"),
            models.Index(fields=["state", "latest_start_at"], name="task_state_latest_start"),
        ]

    def __str__(self) -> str:
        return self.id


class AttemptState(models.TextChoices):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"


class Attempt(StateFollowed):
    """One lease of a task by a worker."""

    id = _id_field()
    task = _ref("Task", db_index=False, related_name="attempts")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=AttemptState.choices, default=AttemptState.RUNNING)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(default=clock.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = _exact_json()
    # The worker's word on a FAILED report: may another attempt succeed? (Why a budget was or was not used.)
    retryable = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="attempt_task_number")]
        indexes = [
            models.Index(fields=["state", "lease_expires_at"], name="attempt_state_lease"),
            # The console's attempt list in one state, by id as every list breaks ties.
            models.Index(fields=["state"], name="attempt_state"),
        ]
