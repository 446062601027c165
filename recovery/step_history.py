"""A step's history, verified to belong to it both ways, and the rules read from it.

A step whose counters agree with its activation index (no activation of another instance, sequences
1..activation_count, the current one the last) is counted: its frontier rows (first and current
activation, the current wait, the tasks they name) are verified here, and the rows behind them, which
no transition changes once superseded and settled, are verified against the counters by weave_check.
Any disagreement makes the check verify every activation, wait, poll round, task and attempt of the
step with aggregate queries instead; any broken relation is corruption (UNAVAILABLE), never guessed
around.
"""

from dataclasses import dataclass
from functools import cached_property, reduce
from operator import or_

from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce, Collate

from core.errors import Aborted, FailedPrecondition, Unavailable
from history.locking import Level
from history.models import (
    TERMINAL_TASK_STATES,
    Activation,
    ActivationState,
    Application,
    Attempt,
    AttemptState,
    PollRound,
    Queue,
    Step,
    StepKind,
    Task,
    TaskState,
    Wait,
    WorkflowInstance,
)
from history.ownership import tasks_owned_by_step
from recovery.context import Context, activation_of_step, step_by_key

# A task that ended without an answer: its step may be retried.
RETRYABLE_TASK_STATES = (TaskState.FAILED, TaskState.CANCELLED)
# A current activation an operator may decide on.
REVIEWABLE_ACTIVATION_STATES = (ActivationState.NEEDS_REVIEW, ActivationState.FAILED, ActivationState.CANCELLED)


def exact(name: str) -> Collate | F:
    """A text column compared byte for byte: MariaDB's default collations ignore case and trailing spaces."""
    if connection.vendor != "mysql":
        return F(name)
    return Collate(name, "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin")


@dataclass
class StepHistory:
    """A step whose whole history is verified to belong to it, with the rows the operations work on.

    The history itself (every activation, wait, poll round, task and attempt) stays in the database:
    ``activations``, ``rounds`` and ``tasks`` are querysets over it. ``current``, ``first`` and ``wait``
    are loaded (locked when committing). ``counts`` is None for a counted history until ``counts_verify``.
    """

    step: Step
    spec: dict
    activation_count: int
    current: Activation | None
    first: Activation | None
    wait: Wait | None  # the current activation's wait
    counts: dict | None  # the aggregates of ``_task_counts``, once every task was verified
    # The tasks the current activation names and the first of them not known settled, when a page read them.
    unsettled_read: tuple[set[str], Task | None] | None = None

    @property
    def counted(self) -> bool:
        return self.counts is None

    def counts_verify(self, ctx: Context) -> dict:
        """Every task of the step verified both ways (UNAVAILABLE when one is not), with their aggregates."""
        if self.counts is None:
            self.counts = _verify_tasks(ctx, self.step, self.spec)
        return self.counts

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
        """Why some historical task is not known settled (the first by id), or None. A settled task never
        becomes unsettled and no transition starts a task before the step's others settled, so in a counted
        history only the tasks its current activation names can be unsettled."""
        frontier = _frontier_tasks(self.current)
        if not self.counted:
            task = _unsettled(self.tasks).first()
        elif self.unsettled_read is not None and self.unsettled_read[0] == frontier:
            task = self.unsettled_read[1]
        else:
            task = _unsettled(Task.objects.filter(pk__in=frontier)).first()
        if task is None:
            return None
        if task.state not in TERMINAL_TASK_STATES:
            return f"task {task.pk} is {task.state}: review it or let it finish first"
        if task.permit_held:
            return f"task {task.pk} still holds its quota permit"
        return f"task {task.pk} has a RUNNING attempt"


def _unsettled(tasks: QuerySet[Task]) -> QuerySet[Task]:
    """Those of ``tasks`` not known settled (not ended, holding a permit or with a RUNNING attempt), by id."""
    running = Exists(Attempt.objects.filter(task_id=OuterRef("pk"), state=AttemptState.RUNNING))
    return (
        tasks.annotate(running=running)
        .filter(~Q(state__in=TERMINAL_TASK_STATES) | Q(permit_held=True) | Q(running=True))
        .order_by("pk")
        .only("pk", "state", "permit_held")
    )


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


def _frontier_tasks(*activations: Activation | None) -> set[str]:
    """The tasks these activations name (TASK: their task; POLL: the last round's)."""
    return {i for a in activations if a is not None for i in (a.task_id, a.last_task_id) if i is not None}


def index_probes(step_ids: list[str]) -> dict[str, dict]:
    """Per step: its lowest activation sequence and its id, the highest, its current activation's sequence, and
    whether an activation of the step is of another instance than the step's: seeks on the activation indexes,
    whatever the length of the history, for any number of steps in one query."""
    activations = Activation.objects.filter(step_id=OuterRef("pk"))
    lowest = activations.order_by("sequence")
    # Another instance's activation sorts before or after the step's own instance: two seeks (a search for any
    # instance but its own walks every activation of the step).
    foreign = Q(lowest_instance__lt=F("instance_id")) | Q(highest_instance__gt=F("instance_id"))
    probes = (
        Step.objects.filter(pk__in=step_ids)
        .alias(
            lowest_instance=Subquery(activations.order_by("instance_id").values("instance_id")[:1]),
            highest_instance=Subquery(activations.order_by("-instance_id").values("instance_id")[:1]),
        )
        .values(
            "pk",
            low=Subquery(lowest.values("sequence")[:1]),
            first_id=Subquery(lowest.values("id")[:1]),
            high=Subquery(activations.order_by("-sequence").values("sequence")[:1]),
            current=Subquery(activations.filter(pk=OuterRef("current_activation_id")).values("sequence")),
            foreign=ExpressionWrapper(foreign, output_field=BooleanField()),
        )
    )
    return {probe.pop("pk"): probe for probe in probes}


def _sequences_verify(step: Step, instance: WorkflowInstance) -> int:
    """The number of the step's activations, all of its instance and numbered 1..n (else UNAVAILABLE)."""
    span = Activation.objects.filter(step_id=step.id).aggregate(
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
    return n


def _frontier_sound(ctx: Context, step: Step, spec: dict, *activations: Activation | None) -> bool:
    """The tasks these activations name are owned by the step both ways and placed as its spec says."""
    frontier = _frontier_tasks(*activations)
    if not frontier:
        return True
    read = ctx.ahead.frontiers.pop(step.id, None)
    if read is not None and read[0] == frontier:
        return frontier <= read[1]
    return Task.objects.filter(_owned_placed(ctx, step, spec, frontier)).count() == len(frontier)


def _owned_placed(ctx: Context, step: Step, spec: dict, task_ids: set[str]) -> Q:
    """Those of ``task_ids`` owned by the step both ways and placed as its spec says."""
    on_queue, of_namespace = _placed(ctx.instance, spec)
    return Q(pk__in=task_ids) & tasks_owned_by_step(instance=ctx.instance, step=step) & on_queue & of_namespace


def read_ahead(pages: list[tuple[Context, dict[str, Step]]]) -> None:
    """Hand each context (with its steps by key) what the checks of its steps read one by one, read for all of
    them at once: for each activated step, ROOT aside, the probe of its activation index, whether its current
    activation is its own, its first and current activations, and for those of a known spec the tasks these name,
    which of them the step owns and placed, the first not known settled and the attempt rows of the current one."""
    active = [(c, s) for c, steps in pages for s in steps.values() if s.current_activation_id]
    active = [(c, s) for c, s in active if s.kind != StepKind.ROOT]
    probes = index_probes([s.id for _, s in active])
    wanted = {s.current_activation_id for _, s in active} | {p["first_id"] for p in probes.values() if p["low"] == 1}
    activations = Activation.objects.in_bulk([i for i in wanted if i])
    for ctx, steps in pages:
        ctx.steps_read.update(steps)
        ctx.steps_all = list(steps.values())
        ctx.ahead.rows.setdefault(Level.STEP, {}).update((s.id, s) for s in steps.values())
    ends = []
    for ctx, step in active:
        probe, current = probes[step.id], activations.get(step.current_activation_id)
        first = activations.get(probe["first_id"]) if probe["low"] == 1 else None
        own = current is not None and (current.step_id, current.instance_id) == (step.id, ctx.instance.id)
        ctx.activations_owned[(step.current_activation_id, step.id)] = own
        ctx.ahead.probes[step.id] = probe
        ctx.ahead.rows.setdefault(Level.ACTIVATION, {}).update((a.id, a) for a in (first, current) if a is not None)
        ends.append(_Ends(ctx, step, first, current))
    _tasks_read_ahead(ends)


@dataclass
class _Ends:
    """A step of a page with its first and current activations, as ``read_ahead`` read them."""

    ctx: Context
    step: Step
    first: Activation | None
    current: Activation | None

    @property
    def frontier(self) -> set[str]:
        return _frontier_tasks(self.first, self.current)

    @property
    def named(self) -> set[str]:
        return _frontier_tasks(self.current)


def _tasks_read_ahead(ends: list[_Ends]) -> None:
    known, owned = [], []
    for end in ends:
        try:
            spec = end.ctx.step_spec(end.step)
        except Unavailable:
            continue  # refused by the check itself, before it reads any task
        known.append(end)
        if end.frontier:
            owned.append(_owned_placed(end.ctx, end.step, spec, end.frontier))
    # A task is owned by one step at most: the step of its source activation.
    sound = Task.objects.filter(reduce(or_, owned)).values_list("pk", "source_activation__step_id") if owned else []
    sound = set(sound)
    unsettled = list(_unsettled(Task.objects.filter(pk__in=set().union(*(end.named for end in known)))))
    chains = [end for end in known if end.step.kind == StepKind.TASK]
    tasks = Task.objects.in_bulk({a.task_id for end in chains for a in (end.first, end.current) if a and a.task_id})
    last = {end.current.task_id for end in chains if end.current is not None and end.current.task_id in tasks}
    attempts = Attempt.objects.filter(task_id__in=last).values("task_id").annotate(n=Count("id"))
    rows = {task_id: 0 for task_id in last} | {row["task_id"]: row["n"] for row in attempts}
    for end in known:
        ahead = end.ctx.ahead
        ahead.frontiers[end.step.id] = (end.frontier, {t for t, s in sound if s == end.step.id})
        ahead.unsettled[end.step.id] = (end.named, next((t for t in unsettled if t.pk in end.named), None))
    for end in chains:
        ids = {a.task_id for a in (end.first, end.current) if a is not None and a.task_id in tasks}
        end.ctx.ahead.rows.setdefault(Level.TASK, {}).update((i, tasks[i]) for i in ids)
        end.ctx.ahead.attempt_rows.update((i, rows[i]) for i in ids & last)


def _step_history_load(ctx: Context, step: Step) -> StepHistory:
    spec = ctx.step_spec(step)
    instance = ctx.instance
    n = step.activation_count
    probe = ctx.ahead.probes.pop(step.id, None) or index_probes([step.id])[step.id]
    if probe["foreign"]:
        raise Unavailable(f"an activation of step {step.key!r} belongs to another instance")
    counted = (probe["low"], probe["high"], probe["current"]) == ((1, n, n) if n else (None, None, None))
    if not counted:
        n = _sequences_verify(step, instance)
    ids = [probe["first_id"] if probe["low"] == 1 else None]
    ids.append(step.current_activation_id if probe["current"] is not None else None)
    loaded = ctx.rows(Level.ACTIVATION, ids)
    current = loaded.get(step.current_activation_id)
    if step.current_activation_id is not None and current is None:
        raise Unavailable(f"step {step.key!r} points at an activation that is not its own")
    first = next((a for a in loaded.values() if a.sequence == 1), None)
    wait = None
    if step.kind != StepKind.TASK:
        wait_id = current.wait_id if current else None
        wait = ctx.rows(Level.WAIT, [wait_id]).get(wait_id)
        # A counted step's earlier waits are superseded with their activations; the current one is checked.
        named_back = wait is not None and (wait.activation_id, wait.step_id, wait.instance_id) == (
            current.id,
            step.id,
            instance.id,
        )
        counted = counted and (wait_id is None or named_back)
        if not counted:
            _verify_waits(ctx, step)
    counted = counted and _frontier_sound(ctx, step, spec, first, current)
    if not counted:
        rounds = PollRound.objects.filter(activation__step_id=step.id)
        if step.kind == StepKind.POLL and rounds.exclude(instance_id=instance.id).exists():
            raise Unavailable(f"a poll round of step {step.key!r} belongs to another instance")
    return StepHistory(
        step=step,
        spec=spec,
        activation_count=n,
        current=current,
        first=first,
        wait=wait,
        counts=None if counted else _verify_tasks(ctx, step, spec),
        unsettled_read=ctx.ahead.unsettled.pop(step.id, None),
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
    owned = tasks_owned_by_step(instance=instance, step=step)
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


def step_conclusion(step: Step) -> str | None:
    """The management conclusion (ResolveStep) saved for the step's current activation, if any."""
    resolution = step.resolution or {}
    if resolution.get("activation_id") != step.current_activation_id:
        return None
    return resolution.get("conclusion")


def step_reviewable(history: StepHistory) -> None:
    """The current activation is in review, failed or cancelled, and every historical task is settled."""
    current = history.current
    if current is None:
        raise FailedPrecondition(f"step {history.step.key!r} has never been activated")
    if current.state not in REVIEWABLE_ACTIVATION_STATES:
        raise FailedPrecondition(
            f"activation {current.sequence} of step {history.step.key!r} is {current.state}, "
            "not NEEDS_REVIEW, FAILED or CANCELLED"
        )
    problem = history.unsettled
    if problem:
        raise FailedPrecondition(problem)
