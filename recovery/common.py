"""What the six operations share: the ordered check pipeline, ownership checks, audits, revisions.

Every operation runs through ``operation_execute``, which fixes one order of checks and writes, so a
command with several faults is always refused for the first of them:
scope → command → idempotency → instance (namespace, queues) → NEEDS_REVIEW → inbox clean →
the operation's own checks (references → revisions → ownership → rules → quota) → writes →
revision bump → workflow audit → receipt → (ReviewTask) the result event, last.

An operation is a small object with ``check`` (reads and locks, raises in that order, returns
a plan) and ``apply`` (writes the plan by composing the engine's transitions: it never writes
an engine row itself). The same ``check`` runs without locks for the eligibility and preview
of ``recovery.eligibility``: one rule set, never two.
"""

import abc
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from django.db import connection
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Collate

from core import clock
from core.errors import Aborted, FailedPrecondition, NotFound, ResourceExhausted, Unauthenticated, Unavailable
from core.identity import Identity
from core.ids import new_id
from core.times import format_optional_time
from engine.state import instance_control_touch
from history import idempotency
from history.audits import audit_write
from history.idempotency import KeyRaced, Receipt, receipt_claim, receipt_freeze, receipt_replay
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    TERMINAL_TASK_STATES,
    Activation,
    Application,
    Attempt,
    AttemptState,
    Credential,
    ExecutionAudit,
    Gate,
    InboxRecord,
    InboxState,
    InstanceState,
    PollRound,
    Queue,
    Scope,
    Step,
    StepKind,
    Task,
    TaskState,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowOperation,
)
from recovery.commands import Command, instance_id_check

_PLAIN_MODELS = {
    Level.STEP: Step,
    Level.ACTIVATION: Activation,
    Level.WAIT: Wait,
    Level.TASK: Task,
}
REPLAN_ATTEMPTS = 3
# A task that ended without an answer: its step may be retried.
RETRYABLE_TASK_STATES = (TaskState.FAILED, TaskState.CANCELLED)


class Replan(Exception):
    """The rows locked for quota are not the ones the command needs now: plan and run again."""


# ---- snapshots for audits and previews -------------------------------------------------


def change(before, after) -> dict:
    return {"before": before, "after": after}


class Plan(abc.ABC):
    """What a checked command will write; ``preview`` shows it without writing."""

    # The instance state and gate after the operation; None keeps them (review stays).
    instance_state: str | None = None
    gate_open: bool | None = None

    @abc.abstractmethod
    def preview(self) -> dict:
        """States before → after and what is kept, for the operator to confirm."""


def instance_snapshot(instance: WorkflowInstance, gate: Gate) -> dict:
    return {
        "state": instance.state,
        "paused": instance.paused,
        "stop_kind": instance.stop_kind,
        "revision": str(instance.revision),
        "control_revision": str(instance.control_revision),
        "gate_open": gate.open,
        "deadline_at": format_optional_time(instance.deadline_at),
    }


def step_snapshot(step: Step) -> dict:
    return {
        "id": step.id,
        "state": step.state,
        "revision": str(step.revision),
        "current_activation_id": step.current_activation_id,
        "output": step.output,
        "resolution": step.resolution,
    }


def activation_snapshot(activation: Activation) -> dict:
    return {
        "id": activation.id,
        "sequence": activation.sequence,
        "state": activation.state,
        "revision": str(activation.revision),
        "output": activation.output,
        "deadline_at": format_optional_time(activation.deadline_at),
        "latest_start_at": format_optional_time(activation.latest_start_at),
    }


def task_snapshot(task: Task) -> dict:
    return {
        "id": task.id,
        "state": task.state,
        "revision": str(task.revision),
        "attempt_count": task.attempt_count,
        "max_attempts": task.max_attempts,
        "permit_held": task.permit_held,
        "review_conclusion": task.review_conclusion,
        "deadline_at": format_optional_time(task.deadline_at),
    }


# ---- the context an operation's checks run in ------------------------------------------


@dataclass
class Context:
    """The instance under recovery and its fixed definition; rows locked (commit) or only read (preview)."""

    identity: Identity
    instance: WorkflowInstance
    definition: WorkflowDefinition
    gate: Gate
    now: dt.datetime
    locks: LockSet | None
    quota: tuple[Application, Queue] | None = None
    request_id: str = ""
    # Each step's verified history (or its corruption) by (step id, step revision): checked once per context.
    histories: dict[tuple[str, int], "StepHistory | Unavailable"] = field(default_factory=dict)
    # Preview only (nothing locked): lookups the checks of one eligibility document repeat per operation.
    steps_read: dict[str, Step] = field(default_factory=dict)
    activations_owned: dict[tuple[str, str], bool] = field(default_factory=dict)

    def rows(self, level: Level, ids: Iterable[str]) -> dict:
        """Rows by id: locked in the fixed order when committing, plainly read for a preview."""
        ids = [i for i in ids if i is not None]
        if self.locks is not None:
            return self.locks.lock(level, ids)
        return {row.pk: row for row in _PLAIN_MODELS[level].objects.filter(pk__in=ids)} if ids else {}

    def step_spec(self, step: Step) -> dict:
        spec = self.definition.step_spec(step.key)
        if spec is None or spec.get("kind") != step.kind:
            raise Unavailable(f"step {step.key!r} does not match the instance's fixed definition")
        return spec

    def require_revision(self, expected: int) -> None:
        if self.instance.revision != expected:
            raise Aborted(
                f"expected_revision {expected} is stale: the instance is at revision {self.instance.revision}; "
                "read it again"
            )

    def quota_rows(self, task: Task) -> tuple[Application, Queue]:
        """The application and queue a task's permit counts against (locked before the instance)."""
        if self.locks is None:
            return (
                Application.objects.get(pk=task.application_id),
                Queue.objects.get(pk=task.queue_id),
            )
        if self.quota is None or (self.quota[0].pk, self.quota[1].pk) != (task.application_id, task.queue_id):
            raise Replan()
        return self.quota


def not_in_review(instance: WorkflowInstance) -> FailedPrecondition | None:
    """The refusal of every operation on an instance outside NEEDS_REVIEW, or None."""
    if instance.state == InstanceState.NEEDS_REVIEW:
        return None
    return FailedPrecondition(f"the instance is {instance.state}; recovery applies only to NEEDS_REVIEW")


def context_open(*, identity: Identity, instance_id: str, locks: LockSet | None) -> Context:
    """The instance-level checks, in order: namespace and queues (NOT_FOUND), NEEDS_REVIEW, inbox clean."""
    if locks is not None:
        instance = locks.lock_one(Level.INSTANCE, instance_id)
    else:
        instance = WorkflowInstance.objects.filter(pk=instance_id).first()
    definition = _accessible_definition(identity=identity, instance=instance)
    if refusal := not_in_review(instance):
        raise refusal
    blocking = (
        InboxRecord.objects.filter(instance_id=instance.id, state__in=[InboxState.PENDING, InboxState.QUARANTINED])
        .values_list("state", flat=True)
        .first()
    )
    if blocking == InboxState.QUARANTINED:
        raise FailedPrecondition("the inbox holds a QUARANTINED record: corruption no declaration can release")
    if blocking == InboxState.PENDING:
        raise FailedPrecondition("the inbox holds unconsumed records: let the runner consume them first")
    gate = locks.lock_one(Level.GATE, instance.id) if locks is not None else Gate.objects.filter(pk=instance.id).first()
    if gate is None:
        raise Unavailable("the instance has no gate")
    return Context(identity=identity, instance=instance, definition=definition, gate=gate, now=clock.now(), locks=locks)


def _accessible_definition(*, identity: Identity, instance: WorkflowInstance | None) -> WorkflowDefinition:
    if instance is None or instance.namespace_id != identity.namespace_id:
        raise NotFound("no such workflow instance")
    definition = WorkflowDefinition.objects.filter(pk=instance.definition_id).first()
    if definition is None or definition.namespace_id != instance.namespace_id:
        raise Unavailable("the instance's definition is missing or in another namespace")
    if not identity.can_access_queues(definition.queues):
        raise NotFound("no such workflow instance")
    return definition


def step_conclusion(step: Step) -> str | None:
    """The management conclusion (ResolveStep) saved for the step's current activation, if any."""
    resolution = step.resolution or {}
    if resolution.get("activation_id") != step.current_activation_id:
        return None
    return resolution.get("conclusion")


def step_by_key(ctx: Context, key: str) -> Step:
    """The step named by the command (NOT_FOUND when absent), locked when committing."""
    step = ctx.steps_read.get(key)
    if step is None:
        pk = Step.objects.filter(instance_id=ctx.instance.id, key=key).values_list("id", flat=True).first()
        step = ctx.rows(Level.STEP, [pk]).get(pk) if pk else None
        if step is not None and ctx.locks is None:
            ctx.steps_read[key] = step
    if step is None or ctx.definition.step_spec(key) is None:
        raise NotFound(f"no step {key!r} in this instance")
    return step


def activation_of_step(ctx: Context, activation_id: str, step: Step) -> None:
    """NOT_FOUND unless the activation belongs to this step of this instance."""
    owned = ctx.activations_owned.get((activation_id, step.id))
    if owned is None:
        owned = Activation.objects.filter(pk=activation_id, step_id=step.id, instance_id=ctx.instance.id).exists()
        if ctx.locks is None:
            ctx.activations_owned[(activation_id, step.id)] = owned
    if not owned:
        raise NotFound(f"no activation {activation_id} of step {step.key!r}")


# ---- a step's history, with two-way ownership checked ----------------------------------


def exact(name: str) -> Collate | F:
    """A text column compared byte for byte: MariaDB's default collations ignore case and trailing spaces."""
    if connection.vendor != "mysql":
        return F(name)
    return Collate(name, "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin")


@dataclass
class StepHistory:
    """A step whose whole history is verified to belong to it, with the rows the operations work on.

    The history itself (every activation, wait, poll round, task and attempt) is verified with
    aggregate queries and stays in the database: ``activations``, ``rounds`` and ``tasks`` are
    querysets over it. ``current``, ``first`` and ``wait`` are loaded (locked when committing).
    """

    step: Step
    spec: dict
    activation_count: int
    task_count: int  # tasks sourced by an activation of the step
    task_sources: int  # activations that source a task
    attempt_count: int  # the sum of the tasks' attempt counts
    retryable_count: int  # tasks FAILED or CANCELLED
    current: Activation | None
    first: Activation | None
    wait: Wait | None  # the current activation's wait

    @property
    def activations(self) -> QuerySet[Activation]:
        return Activation.objects.filter(step_id=self.step.id)

    @property
    def rounds(self) -> QuerySet[PollRound]:
        return PollRound.objects.filter(activation__step_id=self.step.id)

    @property
    def tasks(self) -> QuerySet[Task]:
        return Task.objects.filter(source_activation__step_id=self.step.id)

    @cached_property
    def unsettled(self) -> str | None:
        """Why some historical task is not known settled (the first by id), or None."""
        running = Exists(Attempt.objects.filter(task_id=OuterRef("pk"), state=AttemptState.RUNNING))
        task = (
            self.tasks.annotate(running=running)
            .filter(~Q(state__in=TERMINAL_TASK_STATES) | Q(permit_held=True) | Q(running=True))
            .order_by("pk")
            .only("pk", "state", "permit_held")
            .first()
        )
        if task is None:
            return None
        if task.state not in TERMINAL_TASK_STATES:
            return f"task {task.pk} is {task.state}: review it or let it finish first"
        if task.permit_held:
            return f"task {task.pk} still holds its quota permit"
        return f"task {task.pk} has a RUNNING attempt"


def step_history(ctx: Context, step: Step) -> StepHistory:
    """A step's verified history, once per context and step revision: any broken relation is corruption
    (UNAVAILABLE), and a broken step stays refused for every operation the context checks."""
    key = (step.id, step.revision)
    if key not in ctx.histories:
        try:
            ctx.histories[key] = _step_history_load(ctx, step)
        except Unavailable as error:
            ctx.histories[key] = error
    known = ctx.histories[key]
    if isinstance(known, Unavailable):
        raise Unavailable(known.message)
    return known


def _step_history_load(ctx: Context, step: Step) -> StepHistory:
    spec = ctx.step_spec(step)
    instance = ctx.instance
    activations = Activation.objects.filter(step_id=step.id)
    span = activations.aggregate(
        n=Count("id"),
        low=Min("sequence"),
        high=Max("sequence"),
        distinct=Count("sequence", distinct=True),
        foreign=Count("id", filter=~Q(instance_id=instance.id)),
    )
    n = span["n"]
    if span["foreign"]:
        raise Unavailable(f"an activation of step {step.key!r} belongs to another instance")
    if n and (span["low"], span["high"], span["distinct"]) != (1, n, n):
        raise Unavailable(f"the activation sequence of step {step.key!r} has a gap")
    ids = activations.filter(Q(sequence=1) | Q(pk=step.current_activation_id)).values_list("id", flat=True)
    loaded = ctx.rows(Level.ACTIVATION, ids)
    current = loaded.get(step.current_activation_id)
    if step.current_activation_id is not None and current is None:
        raise Unavailable(f"step {step.key!r} points at an activation that is not its own")
    wait = None
    if step.kind != StepKind.TASK:
        _verify_waits(ctx, step)
        wait_id = current.wait_id if current else None
        wait = ctx.rows(Level.WAIT, [wait_id]).get(wait_id)
    rounds = PollRound.objects.filter(activation__step_id=step.id)
    if step.kind == StepKind.POLL and rounds.exclude(instance_id=instance.id).exists():
        raise Unavailable(f"a poll round of step {step.key!r} belongs to another instance")
    tasks = _verify_tasks(ctx, step, spec)
    return StepHistory(
        step=step,
        spec=spec,
        activation_count=n,
        task_count=tasks["n"],
        task_sources=tasks["sources"],
        attempt_count=tasks["attempts"],
        retryable_count=tasks["retryable"],
        current=current,
        first=next((a for a in loaded.values() if a.sequence == 1), None),
        wait=wait,
    )


def _first_unlisted(rows: QuerySet, column: str, listed: QuerySet) -> str | None:
    """The smallest id in ``rows.column`` that ``listed`` (a queryset of sound rows) does not hold."""
    return (
        rows.filter(**{f"{column}__isnull": False})
        .filter(~Exists(listed.filter(pk=OuterRef(column))))
        .order_by(column)
        .values_list(column, flat=True)
        .first()
    )


def _verify_waits(ctx: Context, step: Step) -> None:
    """Each wait of the step and each wait an activation names: of this step and instance, named back
    by an activation of the step."""
    named_back = Activation.objects.filter(pk=OuterRef("activation_id"), step_id=step.id, wait_id=OuterRef("pk"))
    sound = Q(step_id=step.id, instance_id=ctx.instance.id) & Exists(named_back)
    waits = Wait.objects.filter(step_id=step.id).aggregate(n=Count("id"), sound=Count("id", filter=sound))
    # Each sound wait is named by its own activation: as many naming activations means no other name.
    naming = Activation.objects.filter(step_id=step.id, wait_id__isnull=False).count()
    if waits["n"] == waits["sound"] == naming:
        return
    healthy = Wait.objects.filter(sound)
    broken = [
        _first_unlisted(Wait.objects.filter(step_id=step.id), "pk", healthy),
        _first_unlisted(Activation.objects.filter(step_id=step.id), "wait_id", healthy),
    ]
    wait_id = min((i for i in broken if i), default=None)
    if wait_id is not None:
        raise Unavailable(f"wait {wait_id} and its activation do not reference each other")


def _owned(instance: WorkflowInstance, step: Step) -> Q:
    """A task sourced by an activation of the step, in its instance and namespace, that the source names back:
    a TASK activation by its task_id, a POLL activation by a poll round of the task's source round."""
    owned = Q(source_activation__step_id=step.id, source_instance_id=instance.id, namespace_id=instance.namespace_id)
    if step.kind == StepKind.TASK:
        return owned & Q(source_activation__task_id=F("pk"))
    named = PollRound.objects.filter(activation_id=OuterRef("source_activation_id"), task_id=OuterRef("pk"))
    if step.kind == StepKind.POLL:
        return owned & (
            Exists(named.filter(round=OuterRef("source_round"))) | Q(source_round__isnull=True) & ~Exists(named)
        )
    return owned & Q(source_round__isnull=True)


def _placed(instance: WorkflowInstance, spec: dict) -> tuple[Exists, Exists]:
    """A task on the step's fixed queue; a task of an application of the instance's namespace."""
    queue = Queue.objects.filter(pk=OuterRef("queue_id"), namespace_id=instance.namespace_id)
    queue = queue.alias(exact_name=exact("name")).filter(exact_name=spec.get("queue"))
    application = Application.objects.filter(pk=OuterRef("application_id"), namespace_id=instance.namespace_id)
    return Exists(queue), Exists(application)


def _task_counts(step: Step, owned: Q, placed: Q) -> dict:
    """One pass over the tasks sourced in the step: how many, how many owned and placed, their sources,
    attempts and how many are retryable."""
    return Task.objects.filter(source_activation__step_id=step.id).aggregate(
        n=Count("id"),
        owned=Count("id", filter=owned),
        sound=Count("id", filter=owned & placed),
        rounded=Count("id", filter=owned & Q(source_round__isnull=False)),
        sources=Count("source_activation_id", distinct=True),
        attempts=Coalesce(Sum("attempt_count"), 0),
        retryable=Count("id", filter=Q(state__in=RETRYABLE_TASK_STATES)),
    )


def _tasks_sound(step: Step, tasks: dict) -> bool:
    """Enough for ``_verify_tasks`` to find nothing, from counts: every task sourced in the step is owned and
    placed, and the activations and rounds name no more tasks than the owned ones account for."""
    # An owned task's source names it (TASK) and a round of its source names it (POLL): one each, distinct.
    sourced_elsewhere = ~Exists(Task.objects.filter(pk=OuterRef("last_task_id"), source_activation_id=OuterRef("pk")))
    names = Activation.objects.filter(step_id=step.id).aggregate(
        task=Count("task_id"), last_elsewhere=Count("id", filter=Q(last_task_id__isnull=False) & sourced_elsewhere)
    )
    rounds = PollRound.objects.filter(activation__step_id=step.id).count() if step.kind == StepKind.POLL else 0
    return (
        tasks["n"] == tasks["sound"]
        and names["task"] == (tasks["owned"] if step.kind == StepKind.TASK else 0)
        and names["last_elsewhere"] == 0
        and rounds == (tasks["rounded"] if step.kind == StepKind.POLL else 0)
    )


def _verify_tasks(ctx: Context, step: Step, spec: dict) -> dict:
    """Both directions: each task the step's activations and rounds name, and each task sourced by one of
    them, has its source in this step, and that source names it back; then queue and application.
    Counts prove a sound history; only a doubtful one is searched for its first broken task. Returns the
    counts of ``_task_counts``."""
    instance = ctx.instance
    owned = _owned(instance, step)
    on_queue, of_namespace = _placed(instance, spec)
    counts = _task_counts(step, owned, on_queue & of_namespace)
    if _tasks_sound(step, counts):
        return counts
    healthy = Task.objects.filter(owned)
    activations = Activation.objects.filter(step_id=step.id)
    sourced = Task.objects.filter(source_activation__step_id=step.id)
    broken = [
        _first_unlisted(activations, "task_id", healthy),
        _first_unlisted(activations, "last_task_id", healthy),
        _first_unlisted(sourced, "pk", healthy),
    ]
    if step.kind == StepKind.POLL:
        broken.append(_first_unlisted(PollRound.objects.filter(activation__step_id=step.id), "task_id", healthy))
    task_id = min((i for i in broken if i), default=None)
    if task_id is not None:
        raise _task_refusal(instance, step, task_id)
    stray = (
        sourced.annotate(on_queue=on_queue, of_namespace=of_namespace)
        .filter(Q(on_queue=False) | Q(of_namespace=False))
        .order_by("pk")
        .values_list("pk", "on_queue")
        .first()
    )
    if stray is not None and not stray[1]:
        raise Unavailable(f"task {stray[0]} is not on the step's fixed queue")
    if stray is not None:
        raise Unavailable(f"task {stray[0]} belongs to an application of another namespace")
    return counts


def _task_refusal(instance: WorkflowInstance, step: Step, task_id: str) -> Unavailable:
    """The words for a task that fails the two-way ownership of a step."""
    task = Task.objects.filter(pk=task_id).first()
    source = Activation.objects.filter(pk=task.source_activation_id, step_id=step.id).first() if task else None
    if task is None or source is None or task.source_instance_id != instance.id:
        return Unavailable(f"task {task_id} and step {step.key!r} do not reference each other")
    if task.namespace_id != instance.namespace_id:
        return Unavailable(f"task {task_id} is in another namespace")
    return Unavailable(f"task {task_id} is not referenced back by its source activation")


def step_decision_resolve(ctx: Context, command) -> StepHistory:
    """A step decision's references in order: step and activation exist (NOT_FOUND), are current (ABORTED),
    and own their history both ways (UNAVAILABLE)."""
    step = step_by_key(ctx, command.step_key)
    activation_of_step(ctx, command.activation_id, step)
    ctx.require_revision(command.expected_revision)
    if step.revision != command.expected_step_revision:
        raise Aborted(
            f"expected_step_revision {command.expected_step_revision} is stale: the step is at {step.revision}"
        )
    if step.current_activation_id != command.activation_id:
        raise Aborted(f"activation {command.activation_id} is no longer the step's current activation")
    return step_history(ctx, step)


def quota_take(ctx: Context, task: Task) -> tuple[Application, Queue]:
    """Check that the task's application and queue each have a free slot (RESOURCE_EXHAUSTED)."""
    app, queue = ctx.quota_rows(task)
    if app.active_tasks >= app.max_active_tasks:
        raise ResourceExhausted(f"application {app.name} is at its quota of {app.max_active_tasks} active tasks")
    if queue.active_tasks >= queue.max_active_tasks:
        raise ResourceExhausted(f"queue {queue.name} is at its quota of {queue.max_active_tasks} active tasks")
    return app, queue


# ---- the pipeline -------------------------------------------------------------------------


@dataclass
class Effect:
    """What an operation wrote, for the workflow audit and the receipt."""

    before: dict
    after: dict
    step_key: str = ""
    activation: Activation | None = None
    task_id: str | None = None
    execution_audit: ExecutionAudit | None = None


class Operation(abc.ABC):
    """One recovery operation: its names, command, checks and writes."""

    name: str  # the API path segment, e.g. "retry-step"
    action: str  # the audit action, e.g. "workflow.retry_step"
    command_class: type[Command]

    def quota_task(self, *, identity: Identity, instance_id: str, command) -> Task | None:
        """The task whose application and queue must be locked before the operation key (plain read)."""
        return None

    @abc.abstractmethod
    def check(self, ctx: Context, command) -> Plan:
        """Read (and lock, when committing) what the command needs; raise in the fixed order."""

    @abc.abstractmethod
    def apply(self, ctx: Context, command, plan, *, operation_id: str) -> Effect:
        """Write the checked plan through the engine's transitions."""

    def publish(self, ctx: Context, plan) -> None:  # noqa: B027 - most operations publish nothing
        """Writes that must come after everything else (the result stream); none by default."""


def operation_execute(
    *, operation: Operation, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str
) -> Receipt:
    """Run one recovery command: validated, idempotent, checked in the fixed order, one transaction."""
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    idempotency.key_check(idempotency_key)
    parsed = operation.command_class.parse(command)
    fingerprint = idempotency.fingerprint(operation=operation.name, target=instance_id, command=command)
    for _ in range(REPLAN_ATTEMPTS):
        task = operation.quota_task(identity=identity, instance_id=instance_id, command=parsed)
        try:
            return atomic_with_retry(
                lambda task=task: _commit(
                    operation=operation,
                    identity=identity,
                    instance_id=instance_id,
                    key=idempotency_key,
                    fingerprint=fingerprint,
                    command=parsed,
                    request_id=request_id,
                    quota_task=task,
                )
            )
        except (KeyRaced, Replan):
            continue
    raise Aborted("the instance changed while the command ran; read it again")


def _credential_recheck(locks: LockSet, identity: Identity) -> None:
    if identity.credential_id is None:
        return
    credential: Credential | None = locks.lock_one(Level.CREDENTIAL, identity.credential_id)
    now = clock.now()
    if (
        credential is None
        or credential.revoked_at is not None
        or (credential.expires_at is not None and credential.expires_at <= now)
    ):
        raise Unauthenticated("the credential was revoked or expired")


def _commit(*, operation, identity, instance_id, key, fingerprint, command, request_id, quota_task) -> Receipt:
    locks = LockSet()
    _credential_recheck(locks, identity)
    app = locks.lock_one(Level.APPLICATION, quota_task.application_id) if quota_task else None
    row = receipt_claim(
        locks=locks,
        namespace_id=identity.namespace_id,
        key=key,
        fingerprint=fingerprint,
        operation=operation.name,
        instance_id=instance_id,
    )
    if row.response:
        instance = WorkflowInstance.objects.filter(pk=row.workflow_id).first()
        _accessible_definition(identity=identity, instance=instance)
        return receipt_replay(row=row)
    quota = None
    if quota_task is not None:
        queue = Queue.objects.filter(pk=quota_task.queue_id).first()
        locked_queue = locks.lock_queues(identity.namespace_id, [queue.name]).get(queue.name) if queue else None
        if app is not None and locked_queue is not None:
            quota = (app, locked_queue)
    ctx = context_open(identity=identity, instance_id=instance_id, locks=locks)
    ctx.quota, ctx.request_id = quota, request_id
    plan = operation.check(ctx, command)
    instance, gate = ctx.instance, ctx.gate
    before = instance_snapshot(instance, gate)
    operation_id = new_id()
    effect = operation.apply(ctx, command, plan, operation_id=operation_id)
    instance_control_touch(instance=instance, now=ctx.now)
    audit = audit_write(
        model=WorkflowOperation,
        namespace_id=instance.namespace_id,
        actor_id=identity.actor_id,
        action=operation.action,
        reason=command.reason,
        evidence_ref=command.evidence_ref,
        request_id=request_id,
        before={"instance": before, **effect.before},
        after={"instance": instance_snapshot(instance, gate), **effect.after},
        now=ctx.now,
        workflow=instance,
        operation_id=operation_id,
        step_key=effect.step_key,
        activation=effect.activation,
        execution_audit=effect.execution_audit,
    )
    receipt = receipt_freeze(row=row, data=_receipt_data(operation, instance, audit, effect))
    operation.publish(ctx, plan)
    return receipt


def _receipt_data(operation: Operation, instance: WorkflowInstance, audit: WorkflowOperation, effect: Effect) -> dict:
    data = {"operation_id": audit.operation_id}
    if effect.execution_audit is not None:
        data["execution_operation_id"] = effect.execution_audit.operation_id
    data |= {
        "operation": operation.action,
        "workflow_id": instance.id,
        "revision": str(instance.revision),
        "control_revision": str(instance.control_revision),
        "state": instance.state,
        "paused": instance.paused,
    }
    if effect.step_key:
        data["step_key"] = effect.step_key
    if effect.activation is not None:
        data["activation_id"] = effect.activation.id
        data["activation_sequence"] = effect.activation.sequence
    if effect.task_id is not None:
        data["task_id"] = effect.task_id
    return data
