"""The engine's tables.

Rules that hold for every table here:
- ids are 32 lowercase hex characters in a CharField (never UUIDField);
- relations are ``ForeignKey(db_constraint=False)``: the database holds zero foreign
  keys and the code checks ownership explicitly (a broken relation is corruption);
- client JSON (inputs, outputs, results, payloads) is stored as exact text
  (``core.exactjson``); NULL means absent, the text ``null`` an explicit null.
"""

import copy
import weakref

from django.conf import settings
from django.db import DatabaseError, connections, models, router
from django.db.models.signals import post_save, pre_save

from core import clock, exactjson
from core.ids import new_id


def _id_field() -> models.CharField:
    return models.CharField(primary_key=True, max_length=32, default=new_id, editable=False)


def _ref(to: str, *, null: bool = False, related_name: str = "+", db_index: bool = True) -> models.ForeignKey:
    return models.ForeignKey(
        to,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=null,
        blank=null,
        related_name=related_name,
        db_index=db_index,
    )


def _exact_json(*, null: bool = True) -> models.TextField:
    return models.TextField(null=null, blank=null)


class Revision(models.PositiveBigIntegerField):
    """An unsigned 64-bit revision counter, starting at 1."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("default", 1)
        super().__init__(*args, **kwargs)


# Per connection (a thread's own): the INSERT of a model and the UPDATE of its column sets.
_STATEMENTS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _kept(value):
    """A value as read, safe from later changes in place (JSON documents are copied)."""
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


class StateFollowed(models.Model):
    """A row whose ``state`` the timeline follows: it remembers the state it was read with, so the
    writer of ``history.events`` can record before → after when it is saved.

    It also remembers every column it was read with, so a plain ``save()`` of a row read from the
    database writes only the columns that changed since (nothing at all when none did).
    """

    state_at_load: str | None = None

    class Meta:
        abstract = True

    def save(self, *args, update_fields=None, **kwargs):
        as_read = self.__dict__.get("_as_read")
        if update_fields is None and as_read is not None and not self._state.adding and not args and not kwargs:
            # A column deferred at the read and set since is not in ``as_read``: it counts as changed.
            update_fields = [
                f.attname
                for f in self._meta.concrete_fields
                if not f.primary_key
                and f.attname in self.__dict__
                and (f.attname not in as_read or self.__dict__[f.attname] != as_read[f.attname])
            ]
            if not update_fields:
                return
        if update_fields and not self._state.adding and not args and not kwargs:
            self._update_columns(list(update_fields))
        elif self._state.adding and not args and update_fields is None and set(kwargs) <= {"force_insert", "using"}:
            self._insert_row(kwargs.get("using"))
        else:
            super().save(*args, update_fields=update_fields, **kwargs)
        if as_read is not None:
            for name in update_fields or list(as_read):
                attname = self._meta.get_field(name).attname  # update_fields may name a foreign key by its field
                if attname in self.__dict__:
                    as_read[attname] = _kept(self.__dict__[attname])

    def _update_columns(self, names: list[str]) -> None:
        """``save(update_fields=names)`` of a stored row, as Django runs it (signals, field preparation, a
        row that must exist), through an ``UPDATE`` built once per column set: rows the engine changes
        are saved this way several times a transaction, and rebuilding the query cost more than running it."""
        fields = [self._meta.get_field(name) for name in names]
        if any(hasattr(getattr(self, field.attname), "resolve_expression") for field in fields):
            super().save(update_fields=names)  # an expression is compiled by the query
            return
        using = self._state.db or router.db_for_write(type(self), instance=self)
        database = connections[using]
        pre_save.send(sender=type(self), instance=self, raw=False, using=using, update_fields=frozenset(names))
        values = [field.pre_save(self, False) for field in fields]
        statements = _STATEMENTS.setdefault(database, {})
        columns = tuple(field.column for field in fields)
        if ("UPDATE", type(self), columns) not in statements:
            quote = database.ops.quote_name
            assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
            statements["UPDATE", type(self), columns] = (
                f"UPDATE {quote(self._meta.db_table)} SET {assignments} WHERE {quote(self._meta.pk.column)} = %s"
            )
        params = [
            field.get_db_prep_save(value, connection=database) for field, value in zip(fields, values, strict=True)
        ]
        with database.cursor() as cursor:
            cursor.execute(statements["UPDATE", type(self), columns], [*params, self.pk])
            if cursor.rowcount == 0:
                raise DatabaseError("Save with update_fields did not affect any rows.")
        self._state.db = using
        post_save.send(
            sender=type(self), instance=self, created=False, update_fields=frozenset(names), raw=False, using=using
        )

    def _insert_row(self, using: str | None) -> None:
        """The ``save()`` that creates a row, as Django runs it for a model whose key is set before it is
        saved (signals, field preparation, related rows saved first), through one ``INSERT`` per model."""
        fields = self._meta.local_concrete_fields
        if any(hasattr(getattr(self, field.attname), "resolve_expression") for field in fields):
            super().save(force_insert=True, using=using)  # an expression is compiled by the query
            return
        using = using or router.db_for_write(type(self), instance=self)
        database = connections[using]
        self._prepare_related_fields_for_save(operation_name="save")
        pre_save.send(sender=type(self), instance=self, raw=False, using=using, update_fields=None)
        params = [field.get_db_prep_save(field.pre_save(self, True), connection=database) for field in fields]
        statements = _STATEMENTS.setdefault(database, {})
        if ("INSERT", type(self)) not in statements:
            quote = database.ops.quote_name
            columns = ", ".join(quote(field.column) for field in fields)
            statements["INSERT", type(self)] = (
                f"INSERT INTO {quote(self._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
            )
        with database.cursor() as cursor:
            cursor.execute(statements["INSERT", type(self)], params)
        self._state.adding = False
        self._state.db = using
        post_save.send(sender=type(self), instance=self, created=True, update_fields=None, raw=False, using=using)

    @classmethod
    def from_db(cls, db, field_names, values):
        row = super().from_db(db, field_names, values)
        row.state_at_load = row.__dict__.get("state")
        row._as_read = {name: _kept(value) for name, value in zip(field_names, values, strict=True)}
        return row

    def refresh_from_db(self, using=None, fields=None, from_queryset=None):
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        if fields is None or "state" in fields:
            self.state_at_load = self.__dict__.get("state")
        as_read = self.__dict__.get("_as_read")
        # A deferred column read later arrives here too: from then on it is known as read.
        for name in (fields or list(as_read)) if as_read is not None else ():
            if name in self.__dict__:
                as_read[name] = _kept(self.__dict__[name])


class Namespace(models.Model):
    id = _id_field()
    name = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(default=clock.now)

    def __str__(self) -> str:
        return self.name


class Application(models.Model):
    """An application and its quota of active tasks."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    max_active_tasks = models.PositiveIntegerField(default=100)
    active_tasks = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="application_ns_name")]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    name = models.CharField(max_length=128)
    max_active_tasks = models.PositiveIntegerField(default=100)
    active_tasks = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="queue_ns_name")]

    def __str__(self) -> str:
        return self.name


class Scope(models.TextChoices):
    READ = "workflows:read"
    AUDIT_READ = "workflows:audit:read"
    RECOVER = "workflows:recover"
    WRITE = "workflows:write"
    CONTROL = "workflows:control"
    TASKS_WORK = "tasks:work"
    # Notes, acknowledgement and assignment: what people say about an instance, never its state.
    ANNOTATE = "workflows:annotate"


class Credential(models.Model):
    """A bearer token. Only its SHA-256 digest is stored; the token is shown once."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    application = _ref("Application", null=True, db_index=False)
    actor_id = models.CharField(max_length=32)
    label = models.CharField(max_length=128, blank=True)
    key_id = models.CharField(max_length=16, unique=True)
    token_digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    # "*" for every queue of the namespace, otherwise a list of queue names.
    queue_access = models.JSONField(default=list)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.label or self.key_id


class Operator(models.Model):
    """The identity a Django admin user acts under."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="weave_operator",
    )
    namespace = _ref("Namespace", db_index=False)
    actor_id = models.CharField(max_length=32)
    queue_access = models.JSONField(default=list)
    # The IANA zone the console shows this operator's times in (Preferences in the admin).
    time_zone = models.CharField(max_length=64, default="UTC")


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
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "state", "updated_at"], name="instance_ns_state_updated"),
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
            models.Index(fields=["namespace", "review_cause", "review_since", "id"], name="instance_ns_cause_since"),
            # Exact business key and prefix ranges.
            models.Index(fields=["namespace", "business_key", "id"], name="instance_ns_business_key"),
            # The review summary counts from this index alone.
            models.Index(
                fields=["namespace", "state", "definition", "review_cause"], name="instance_ns_review_summary"
            ),
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
            models.Index(fields=["queue", "state", "priority", "created_at"], name="task_queue_state_priority"),
            models.Index(fields=["source_activation", "created_at"], name="task_source_activation"),
            # An instance's tasks in one state (those in review) without reading the rest of its history.
            models.Index(fields=["source_instance", "state"], name="task_source_instance_state"),
            models.Index(fields=["namespace", "state", "updated_at"], name="task_ns_state_updated"),
            models.Index(fields=["namespace", "created_at"], name="task_ns_created"),
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
        indexes = [models.Index(fields=["state", "lease_expires_at"], name="attempt_state_lease")]


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
    state = models.CharField(max_length=16, choices=WaitState.choices, default=WaitState.WAITING)
    winner_signal = _ref("Signal", null=True, db_index=False)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [
            models.Index(fields=["step", "state"], name="wait_step_state"),
            models.Index(fields=["state", "deadline_at"], name="wait_state_deadline"),
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
        ]


class AuditRecord(models.Model):
    """Shared shape of the three audits: who did what, why, on which evidence, before → after."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    operation_id = models.CharField(max_length=32, default=new_id)
    actor_id = models.CharField(max_length=32)
    action = models.CharField(max_length=32)
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    request_id = models.CharField(max_length=32, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        abstract = True


class SignalOperation(AuditRecord):
    """Signal resource audit. ``after`` is the acceptance snapshot and is never rewritten."""

    workflow = _ref("WorkflowInstance", db_index=False)
    signal = _ref("Signal", db_index=False)

    class Meta:
        indexes = [
            models.Index(
                fields=["namespace", "workflow", "signal", "created_at", "id"], name="signal_operation_history"
            )
        ]


class WorkflowOperation(AuditRecord):
    workflow = _ref("WorkflowInstance", db_index=False)
    step_key = models.CharField(max_length=64, blank=True)
    activation = _ref("Activation", null=True, db_index=False)
    execution_audit = _ref("ExecutionAudit", null=True, db_index=False)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "workflow", "created_at", "id"], name="workflow_operation_history"),
            models.Index(fields=["action", "created_at"], name="workflow_operation_action"),
        ]


class ExecutionAudit(AuditRecord):
    task = _ref("Task", db_index=False)

    class Meta:
        indexes = [models.Index(fields=["namespace", "task", "created_at"], name="execution_audit_task")]


class IdempotencyReceipt(models.Model):
    """The frozen answer to a committed command, replayed for the same key and command."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    key = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    operation = models.CharField(max_length=32)
    workflow = _ref("WorkflowInstance", null=True, db_index=False)
    status_code = models.PositiveSmallIntegerField(default=200)
    response = models.TextField()
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "key"], name="receipt_ns_key")]


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


class ApprovalPolicy(models.Model):
    """How many approvals a recovery operation needs before it runs (0 or 1); the most specific row wins:
    definition and operation, then definition, then operation, then the namespace's blank row. None: 0."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    definition_name = models.CharField(max_length=128, blank=True, help_text="blank: every definition")
    operation = models.CharField(max_length=32, blank=True, help_text="an operation's API name; blank: every one")
    approvals_required = models.PositiveSmallIntegerField(default=1, choices=[(0, "0"), (1, "1")])

    class Meta:
        verbose_name_plural = "approval policies"
        constraints = [
            models.UniqueConstraint(fields=["namespace", "definition_name", "operation"], name="policy_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.definition_name or 'any definition'} / {self.operation or 'any operation'}"


class ProposalState(models.TextChoices):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


class Proposal(models.Model):
    """A recovery command held for a second person's approval: exactly as submitted, with its preview.

    Approval runs ``command`` through the operation's pipeline, whose revision checks make a proposal
    stale once anything it was checked against has moved. Decisions are also in the workflow audit.
    """

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    operation = models.CharField(max_length=32)
    command = _exact_json(null=False)
    preview = models.JSONField()
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    expected_revision = models.PositiveBigIntegerField()
    proposed_by = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=ProposalState.choices, default=ProposalState.PENDING)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    decided_by = models.CharField(max_length=32, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.CharField(max_length=1024, blank=True)
    # The workflow audit of the approved operation's effect.
    operation_id = models.CharField(max_length=32, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workflow", "state"], name="proposal_workflow_state"),
            models.Index(fields=["state", "expires_at"], name="proposal_state_expires"),
        ]


class Note(models.Model):
    """What an operator says about an instance: append-only; a correction is a new note naming the one it
    corrects. Notes never change the engine's state or revisions."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    text = models.TextField()
    evidence_ref = models.CharField(max_length=512, blank=True)
    author = models.CharField(max_length=32)
    corrects = _ref("Note", null=True, db_index=False)
    request_id = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [models.Index(fields=["namespace", "workflow", "created_at", "id"], name="note_history")]


class ReviewAttention(models.Model):
    """Who has seen an instance's current review and who is on it; kept apart from the engine's state.

    ``review_since`` names the review it belongs to: when the instance leaves review and comes back,
    the row no longer matches and the new review starts unacknowledged and unassigned.
    """

    instance = models.OneToOneField(
        "WorkflowInstance", on_delete=models.DO_NOTHING, db_constraint=False, primary_key=True, related_name="+"
    )
    review_since = models.DateTimeField()
    acknowledged_by = models.CharField(max_length=32, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    assignee = models.CharField(max_length=32, blank=True)
    assigned_by = models.CharField(max_length=32, blank=True)
    assigned_at = models.DateTimeField(null=True, blank=True)
