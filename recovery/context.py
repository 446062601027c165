"""The context an operation's checks run in: the instance under recovery, its definition and gate,
read in the fixed order of the instance-level checks, and the rows the checks name.

When committing, every row is locked in the one lock order (``history.locking``); for an
eligibility or preview nothing is locked and repeated lookups are remembered per context.
"""

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db.models import OuterRef, QuerySet, Subquery

from core import clock
from core.errors import Aborted, FailedPrecondition, NotFound, ResourceExhausted, Unavailable, WeaveError
from core.identity import Identity
from engine.quota import quota_of_task
from history.locking import Level, LockSet
from history.models import (
    Activation,
    Application,
    Gate,
    InboxRecord,
    InboxState,
    InstanceState,
    Queue,
    Step,
    StepKind,
    Task,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.selectors.access import INSTANCE_NOT_FOUND, definition_of_visible, instance_definition_visible

if TYPE_CHECKING:
    from recovery.step_history import StepHistory

# The inbox states that keep an instance from recovery.
_BLOCKING = (InboxState.PENDING, InboxState.QUARANTINED)
_PLAIN_MODELS = {
    Level.STEP: Step,
    Level.ACTIVATION: Activation,
    Level.WAIT: Wait,
    Level.TASK: Task,
}


@dataclass
class ReadAhead:
    """What the checks of a context read one by one, read for every instance of a page at once (its eligibility,
    ``step_history.read_ahead``): the rows, for every check of the context; the rest once, for the first asking."""

    probes: dict[str, dict] = field(default_factory=dict)  # by step id: its activation index probe
    rows: dict[Level, dict[str, Step | Activation | Task]] = field(default_factory=dict)  # by level and id
    attempt_rows: dict[str, int] = field(default_factory=dict)  # by task id: its attempt rows
    running: dict[str, bool] = field(default_factory=dict)  # by task id: whether it has a RUNNING attempt
    # By step id: the tasks its first and current activations name, and those owned by the step and placed.
    frontiers: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)
    # By step id: the tasks its current activation names, and the first of them not known settled.
    unsettled: dict[str, tuple[set[str], Task | None]] = field(default_factory=dict)


@dataclass
class Context:
    """The instance under recovery and its fixed definition; rows locked (commit) or only read (preview)."""

    identity: Identity
    instance: WorkflowInstance
    definition: WorkflowDefinition
    gate: Gate
    now: dt.datetime
    locks: LockSet | None
    request_id: str = ""
    # Each step's verified history (or its corruption) by (step id, step revision): checked once per context.
    histories: dict[tuple[str, int], "StepHistory | Unavailable"] = field(default_factory=dict)
    # Preview only (nothing locked): lookups the checks of one eligibility document repeat per operation.
    steps_read: dict[str, Step] = field(default_factory=dict)
    activations_owned: dict[tuple[str, str], bool] = field(default_factory=dict)
    # Preview only, for a page judged at once: all the instance's steps, and what its steps' checks read.
    steps_all: list[Step] | None = None
    ahead: ReadAhead = field(default_factory=ReadAhead)
    # The application and queue rows by (application id, queue id): shared by the contexts ``contexts_read`` makes.
    quotas_read: dict[tuple[str, str], tuple[Application, Queue]] = field(default_factory=dict)

    def rows(self, level: Level, ids: Iterable[str]) -> dict:
        """Rows by id: locked in the fixed order when committing, plainly read for a preview."""
        ids = [i for i in ids if i is not None]
        if self.locks is not None:
            return self.locks.lock(level, ids)
        ahead = self.ahead.rows.get(level, {})
        if ids and all(i in ahead for i in ids):
            return {i: ahead[i] for i in ids}
        return {row.pk: row for row in _PLAIN_MODELS[level].objects.filter(pk__in=ids)} if ids else {}

    def row_where(self, level: Level, pk: str | None, **columns) -> Step | Activation | Task | None:
        """The row ``pk`` when its ``columns`` hold these values, else None, plainly read even when committing. A row
        read ahead answers when it matches; one that does not is read again, so that the table decides a refusal."""
        read = self.ahead.rows.get(level, {}).get(pk)
        if read is not None and all(getattr(read, name) == value for name, value in columns.items()):
            return read
        return _PLAIN_MODELS[level].objects.filter(pk=pk, **columns).first()

    def instance_steps(self) -> list[Step]:
        """The instance's steps, ROOT aside, by key (plainly read: a step decision locks its own step)."""
        steps = self.steps_all if self.steps_all is not None else Step.objects.filter(instance_id=self.instance.id)
        return sorted((s for s in steps if s.kind != StepKind.ROOT), key=lambda s: s.key)

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
        """The application and queue a task's permit counts against (locked now: the quota rows come last)."""
        if self.locks is None:
            key = (task.application_id, task.queue_id)
            if key not in self.quotas_read:
                self.quotas_read[key] = (Application.objects.get(pk=key[0]), Queue.objects.get(pk=key[1]))
            return self.quotas_read[key]
        quota = quota_of_task(locks=self.locks, task=task)
        return quota.application, quota.queue_of(task)


def not_in_review(instance: WorkflowInstance) -> FailedPrecondition | None:
    """The refusal of every operation on an instance outside NEEDS_REVIEW, or None."""
    if instance.state == InstanceState.NEEDS_REVIEW:
        return None
    return FailedPrecondition(f"the instance is {instance.state}; recovery applies only to NEEDS_REVIEW")


def context_open(
    *, identity: Identity, instance_id: str, locks: LockSet | None, expected_revision: int | None = None
) -> Context:
    """The instance-level checks, in order: namespace and queues (NOT_FOUND), ``expected_revision`` when given
    (a proposal's: ABORTED once the instance moved, whatever it moved to), NEEDS_REVIEW, inbox clean."""
    if locks is not None:
        instance = locks.lock_one(Level.INSTANCE, instance_id)
    else:
        instance = WorkflowInstance.objects.filter(pk=instance_id).first()
    definition = instance_definition_visible(identity=identity, instance=instance)
    if expected_revision is not None and instance.revision != expected_revision:
        raise Aborted(
            f"the proposal is stale: it was checked at revision {expected_revision} and the instance is at "
            f"{instance.revision}; propose it again"
        )
    if refusal := not_in_review(instance):
        raise refusal
    _inbox_check(_blocking(instance.id).first())
    gate = locks.lock_one(Level.GATE, instance.id) if locks is not None else Gate.objects.filter(pk=instance.id).first()
    return _context(identity=identity, instance=instance, definition=definition, gate=gate, locks=locks)


def contexts_read(*, identity: Identity, instance_ids: list[str]) -> dict[str, Context | WeaveError]:
    """The unlocked contexts of many instances (an eligibility's), each judged as ``context_open`` judges it
    (or the refusal it raises), from one read per table: a page of instances costs as much as one."""
    # The first record in each blocking state: a seek each (a search for both at once walks the instance's inbox).
    firsts = {state: Subquery(_blocking(OuterRef("pk")).filter(state=state).values("pk")[:1]) for state in _BLOCKING}
    instances = WorkflowInstance.objects.filter(pk__in=instance_ids).annotate(**firsts).in_bulk()
    definitions = WorkflowDefinition.objects.in_bulk({i.definition_id for i in instances.values()})
    gates = Gate.objects.in_bulk(list(instances))
    contexts, quotas_read = {}, {}
    for instance_id in instance_ids:
        instance = instances.get(instance_id)
        try:
            if instance is None:
                raise NotFound(INSTANCE_NOT_FOUND)
            definition = definition_of_visible(
                identity=identity, instance=instance, definition=definitions.get(instance.definition_id)
            )
            if refusal := not_in_review(instance):
                raise refusal
            found = [(getattr(instance, state), state) for state in _BLOCKING if getattr(instance, state) is not None]
            _inbox_check(min(found)[1] if found else None)
            gate = gates.get(instance_id)
            ctx = _context(identity=identity, instance=instance, definition=definition, gate=gate, locks=None)
            ctx.quotas_read = quotas_read
            contexts[instance_id] = ctx
        except WeaveError as error:
            contexts[instance_id] = error
    return contexts


def _blocking(instance_id) -> QuerySet:
    """The states of the instance's inbox records that block recovery, the first record's first."""
    blocking = InboxRecord.objects.filter(state__in=_BLOCKING)
    return blocking.filter(instance_id=instance_id).order_by("pk").values_list("state", flat=True)


def _inbox_check(blocking: str | None) -> None:
    if blocking == InboxState.QUARANTINED:
        raise FailedPrecondition("the inbox holds a QUARANTINED record: corruption no declaration can release")
    if blocking == InboxState.PENDING:
        raise FailedPrecondition("the inbox holds unconsumed records: let the runner consume them first")


def _context(*, identity: Identity, instance, definition, gate: Gate | None, locks: LockSet | None) -> Context:
    if gate is None:
        raise Unavailable("the instance has no gate")
    return Context(identity=identity, instance=instance, definition=definition, gate=gate, now=clock.now(), locks=locks)


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


def quota_take(ctx: Context, task: Task) -> tuple[Application, Queue]:
    """Check that the task's application and queue each have a free slot (RESOURCE_EXHAUSTED)."""
    app, queue = ctx.quota_rows(task)
    if app.active_tasks >= app.max_active_tasks:
        raise ResourceExhausted(f"application {app.name} is at its quota of {app.max_active_tasks} active tasks")
    if queue.active_tasks >= queue.max_active_tasks:
        raise ResourceExhausted(f"queue {queue.name} is at its quota of {queue.max_active_tasks} active tasks")
    return app, queue
