"""What the six operations share: the ordered check pipeline, ownership checks, audits, revisions.

Every operation runs through ``operation_execute``, which fixes the order of SPEC §5.1:
scope → command → idempotency → instance (namespace, queues) → NEEDS_REVIEW → inbox clean →
the operation's own checks (references → revisions → ownership → rules → quota) → writes →
revision bump → workflow audit → receipt → (ReviewTask) the result event, last.

An operation is a small object with ``check`` (reads and locks, raises in the SPEC order,
returns a plan) and ``apply`` (writes the plan). The same ``check`` runs without locks for
the eligibility and preview of ``recovery.eligibility``: one rule set, never two.
"""

import abc
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Model

from history import clock
from history.errors import Aborted, FailedPrecondition, NotFound, ResourceExhausted, Unauthenticated, Unavailable
from history.identity import Identity
from history.ids import new_id
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
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowOperation,
)
from recovery.commands import Command, command_fingerprint, idempotency_key_check, instance_id_check
from recovery.receipts import KeyRaced, Receipt, receipt_claim, receipt_freeze, receipt_replay

_PLAIN_MODELS = {
    Level.STEP: Step,
    Level.ACTIVATION: Activation,
    Level.WAIT: Wait,
    Level.TASK: Task,
}
REPLAN_ATTEMPTS = 3


class Replan(Exception):
    """The rows locked for quota are not the ones the command needs now: plan and run again."""


def rfc3339(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    text = value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{value.microsecond:06d}Z" if value.microsecond else "Z")


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
        "deadline_at": rfc3339(instance.deadline_at),
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
        "deadline_at": rfc3339(activation.deadline_at),
        "latest_start_at": rfc3339(activation.latest_start_at),
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
        "deadline_at": rfc3339(task.deadline_at),
    }


def bump(row: Model, *, now: dt.datetime, **changes) -> None:
    """Apply ``changes`` to a row, advance its revision and save only what changed."""
    for name, value in changes.items():
        setattr(row, name, value)
    row.revision += 1
    names = [*changes, "revision"]
    if hasattr(row, "updated_at"):
        row.updated_at = now
        names.append("updated_at")
    row.save(update_fields=names)


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


def context_open(*, identity: Identity, instance_id: str, locks: LockSet | None) -> Context:
    """The instance-level checks, in order: namespace and queues (NOT_FOUND), NEEDS_REVIEW, inbox clean."""
    if locks is not None:
        instance = locks.lock_one(Level.INSTANCE, instance_id)
    else:
        instance = WorkflowInstance.objects.filter(pk=instance_id).first()
    definition = _accessible_definition(identity=identity, instance=instance)
    if instance.state != InstanceState.NEEDS_REVIEW:
        raise FailedPrecondition(f"the instance is {instance.state}; recovery applies only to NEEDS_REVIEW")
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
    pk = Step.objects.filter(instance_id=ctx.instance.id, key=key).values_list("id", flat=True).first()
    step = ctx.rows(Level.STEP, [pk]).get(pk) if pk else None
    if step is None or ctx.definition.step_spec(key) is None:
        raise NotFound(f"no step {key!r} in this instance")
    return step


# ---- a step's history, with two-way ownership checked ----------------------------------


@dataclass
class StepHistory:
    """Every activation, wait, poll round, task and attempt of one step, verified to belong to it."""

    step: Step
    spec: dict
    activations: list[Activation]
    waits: dict[str, Wait]
    rounds: list[PollRound]
    tasks: dict[str, Task]
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)

    @property
    def current(self) -> Activation | None:
        return next((a for a in self.activations if a.pk == self.step.current_activation_id), None)

    @property
    def first(self) -> Activation:
        return self.activations[0]

    def attempts_used(self, task_ids: Iterable[str]) -> int:
        return sum(len(self.attempts.get(t, ())) for t in task_ids)

    def unsettled(self) -> str | None:
        """Why some historical task is not known settled, or None."""
        for task_id in sorted(self.tasks):
            task = self.tasks[task_id]
            if task.state not in TERMINAL_TASK_STATES:
                return f"task {task_id} is {task.state}: review it or let it finish first"
            if task.permit_held:
                return f"task {task_id} still holds its quota permit"
            if any(a.state == AttemptState.RUNNING for a in self.attempts.get(task_id, ())):
                return f"task {task_id} has a RUNNING attempt"
        return None

    def round_tasks(self, number: int) -> list[Task]:
        """The query tasks of one business round, across activations, oldest first."""
        ids = [r.task_id for r in self.rounds if r.round == number]
        return sorted((self.tasks[i] for i in ids), key=lambda t: (t.created_at, t.pk))

    def last_round(self, activation: Activation) -> int | None:
        numbers = [r.round for r in self.rounds if r.activation_id == activation.pk]
        return max(numbers) if numbers else None


def step_history(ctx: Context, step: Step) -> StepHistory:
    """Load and verify a step's history: any broken relation is corruption (UNAVAILABLE)."""
    spec = ctx.step_spec(step)
    instance = ctx.instance
    act_ids = Activation.objects.filter(step_id=step.id).values_list("id", flat=True)
    activations = sorted(ctx.rows(Level.ACTIVATION, act_ids).values(), key=lambda a: a.sequence)
    by_id = {a.pk: a for a in activations}
    if any(a.instance_id != instance.id or a.step_id != step.id for a in activations):
        raise Unavailable(f"an activation of step {step.key!r} belongs to another instance")
    if [a.sequence for a in activations] != list(range(1, len(activations) + 1)):
        raise Unavailable(f"the activation sequence of step {step.key!r} has a gap")
    if step.current_activation_id is not None and step.current_activation_id not in by_id:
        raise Unavailable(f"step {step.key!r} points at an activation that is not its own")

    waits: dict[str, Wait] = {}
    if step.kind != StepKind.TASK:
        wait_ids = set(Wait.objects.filter(step_id=step.id).values_list("id", flat=True))
        wait_ids |= {a.wait_id for a in activations if a.wait_id}
        waits = ctx.rows(Level.WAIT, wait_ids)
        for wait_id in wait_ids:
            wait = waits.get(wait_id)
            owner = by_id.get(wait.activation_id) if wait else None
            if owner is None or owner.wait_id != wait_id or wait.step_id != step.id or wait.instance_id != instance.id:
                raise Unavailable(f"wait {wait_id} and its activation do not reference each other")

    rounds = list(PollRound.objects.filter(activation_id__in=list(by_id))) if step.kind == StepKind.POLL else []
    if any(r.instance_id != instance.id for r in rounds):
        raise Unavailable(f"a poll round of step {step.key!r} belongs to another instance")
    referenced = {a.task_id for a in activations if a.task_id} | {a.last_task_id for a in activations if a.last_task_id}
    referenced |= {r.task_id for r in rounds}
    pointing = set(Task.objects.filter(source_activation_id__in=list(by_id)).values_list("id", flat=True))
    tasks = ctx.rows(Level.TASK, referenced | pointing)
    _verify_tasks(ctx, step, spec, by_id, rounds, tasks, referenced | pointing)
    attempts: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(task_id__in=list(tasks)).order_by("task_id", "number"):
        attempts[attempt.task_id].append(attempt)
    return StepHistory(
        step=step, spec=spec, activations=activations, waits=waits, rounds=rounds, tasks=tasks, attempts=attempts
    )


def _verify_tasks(ctx, step, spec, activations, rounds, tasks, wanted) -> None:
    """Both directions: each task's source names an activation of this step that names the task back."""
    instance = ctx.instance
    round_of = {(r.activation_id, r.task_id): r.round for r in rounds}
    for task_id in sorted(wanted):
        task = tasks.get(task_id)
        source = activations.get(task.source_activation_id) if task else None
        if task is None or source is None or task.source_instance_id != instance.id:
            raise Unavailable(f"task {task_id} and step {step.key!r} do not reference each other")
        if task.namespace_id != instance.namespace_id:
            raise Unavailable(f"task {task_id} is in another namespace")
        if step.kind == StepKind.TASK:
            owned = source.task_id == task_id
        else:
            owned = round_of.get((source.pk, task_id)) == task.source_round
        if not owned:
            raise Unavailable(f"task {task_id} is not referenced back by its source activation")
    queue_ids = {t.queue_id for t in tasks.values()}
    queues = {q.pk: q for q in Queue.objects.filter(pk__in=queue_ids)} if queue_ids else {}
    app_ids = {t.application_id for t in tasks.values()}
    apps = {a.pk: a for a in Application.objects.filter(pk__in=app_ids)} if app_ids else {}
    for task in tasks.values():
        queue, app = queues.get(task.queue_id), apps.get(task.application_id)
        if queue is None or queue.namespace_id != instance.namespace_id or queue.name != spec.get("queue"):
            raise Unavailable(f"task {task.pk} is not on the step's fixed queue")
        if app is None or app.namespace_id != instance.namespace_id:
            raise Unavailable(f"task {task.pk} belongs to an application of another namespace")


def step_decision_resolve(ctx: Context, command) -> StepHistory:
    """A step decision's references in order: step and activation exist (NOT_FOUND), are current (ABORTED),
    and own their history both ways (UNAVAILABLE)."""
    step = step_by_key(ctx, command.step_key)
    if not Activation.objects.filter(pk=command.activation_id, step_id=step.id, instance_id=ctx.instance.id).exists():
        raise NotFound(f"no activation {command.activation_id} of step {step.key!r}")
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


def quota_adjust(quota: tuple[Application, Queue], delta: int) -> None:
    for row in quota:
        row.active_tasks += delta
        row.save(update_fields=["active_tasks"])


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
        """Read (and lock, when committing) what the command needs; raise in the SPEC order."""

    @abc.abstractmethod
    def apply(self, ctx: Context, command, plan, *, operation_id: str) -> Effect:
        """Write the checked plan."""

    def publish(self, ctx: Context, plan) -> None:  # noqa: B027 - most operations publish nothing
        """Writes that must come after everything else (the result stream); none by default."""


def operation_execute(
    *, operation: Operation, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str
) -> Receipt:
    """Run one recovery command: validated, idempotent, checked in the SPEC order, one transaction."""
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    idempotency_key_check(idempotency_key)
    parsed = operation.command_class.parse(command)
    fingerprint = command_fingerprint(operation=operation.name, instance_id=instance_id, raw=command)
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
    instance.revision += 1
    instance.control_revision += 1
    instance.updated_at = ctx.now
    instance.save()
    audit = WorkflowOperation.objects.create(
        namespace_id=instance.namespace_id,
        workflow=instance,
        operation_id=operation_id,
        actor_id=identity.actor_id,
        action=operation.action,
        reason=command.reason,
        evidence_ref=command.evidence_ref,
        request_id=request_id,
        step_key=effect.step_key,
        activation=effect.activation,
        execution_audit=effect.execution_audit,
        before={"instance": before, **effect.before},
        after={"instance": instance_snapshot(instance, gate), **effect.after},
        created_at=ctx.now,
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
