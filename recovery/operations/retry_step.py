"""RetryStep: a new activation and task for a TASK or POLL step, within the original budget.

TASK: the new task gets what is left of the definition's max_attempts after every attempt of
every historical task of the step; the activations of the step never outnumber max_attempts.
POLL: the same business round is re-queried with what is left of its attempts_per_round; a new
business round is never opened, and a round already classified is never re-queried. A POLL step
whose final-signal wait broke gets a new wait generation instead (no query, no task).
The new task inherits the original deadline, latest start, exact input and business keys, is
charged to the original task's application and queue, and waits behind the closed gate.
"""

from dataclasses import dataclass

from django.db.models import BooleanField, Case, Count, F, Max, OuterRef, Q, QuerySet, Subquery, When
from django.db.models.functions import Coalesce

from core.errors import FailedPrecondition, Unavailable
from core.times import format_optional_time
from engine.activation import activation_retry, activation_superseded_state
from engine.budget import Budget, attempt_budget, link_max_attempts, predecessor_left_exactly
from history.audits import activation_snapshot, step_snapshot, task_snapshot
from history.locking import Level
from history.models import (
    ActivationState,
    Attempt,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    WaitKind,
)
from recovery.commands import Declaration, StepDecision
from recovery.context import Context, quota_take
from recovery.pipeline import Effect, Operation, Plan, change
from recovery.step_history import (
    RETRYABLE_TASK_STATES,
    StepHistory,
    exact,
    step_conclusion,
    step_decision_resolve,
    step_reviewable,
)
from recovery.wait_generation import RearmPlan, wait_generation_next, wait_rearmable


@dataclass(frozen=True)
class RetryStepCommand(StepDecision):
    declaration = Declaration(
        "safe_to_retry",
        asserts="re-running with the same fixed input is safe",
        wording=(
            "Re-running with the same fixed input is safe: business_key and concurrency_key do not deduplicate, "
            "so the external operation's identity is in the fixed input and the evidence shows a retry is safe."
        ),
    )

    safe_to_retry: bool


@dataclass
class RetryPlan(Plan):
    history: StepHistory
    previous: Task  # the task the new one retries (retry_of)
    original: Task  # the first task of the chain, whose deadlines are kept
    business_round: int | None
    attempts_used: int
    remaining: int
    quota: tuple

    def preview(self) -> dict:
        step, current = self.history.step, self.history.current
        preview = {
            "step_key": step.key,
            "step": {"state": change(step.state, StepState.ACTIVE)},
            "activation": {
                "id": current.id,
                "state": change(current.state, activation_superseded_state(current)),
            },
            "new_activation": {"sequence": current.sequence + 1, "state": ActivationState.ACTIVE},
            "new_task": {"retry_of": self.previous.id, "state": TaskState.QUEUED, "max_attempts": self.remaining},
            "attempt_budget": {"used": self.attempts_used, "remaining": self.remaining},
            "deadlines_kept": {
                "deadline_at": format_optional_time(self.original.deadline_at),
                "latest_start_at": format_optional_time(self.original.latest_start_at),
            },
        }
        if self.business_round is not None:
            preview["new_activation"]["first_round"] = self.business_round
        return preview


FIXED_TASK_FIELDS = (*Task.FIXED_FIELDS, "queue_id", "application_id")
TEXT_TASK_FIELDS = ("handler", "input", "business_key", "concurrency_key")


@dataclass
class Chain:
    """The tasks a retry continues (TASK: all of the step; POLL: the current activation's last round
    across activations), verified link by link, and the attempt budget they share."""

    business_round: int | None
    budget: int
    original: Task | None = None  # the first task, whose deadlines are kept
    previous: Task | None = None  # the last task, which the new one retries
    answered: Task | None = None  # the first task that is neither FAILED nor CANCELLED
    attempts_used: int = 0
    activations: int = 0  # activations counted against the budget


def _link_problem(task: Task, rows: int, previous: Task | None, first: Task, budget: int) -> str | None:
    """What breaks one link of a chain whose earlier links hold (else None): attempt rows, retry_of, the
    fixed task fields and max_attempts = what the earlier tasks left of the budget."""
    if rows != task.attempt_count:
        return f"task {task.id} counts {task.attempt_count} attempts but has other attempt rows"
    if previous is not None and task.retry_of_id != previous.id:
        return f"task {task.id} does not retry its predecessor {previous.id}"
    if any(getattr(task, name) != getattr(first, name) for name in FIXED_TASK_FIELDS):
        return f"task {task.id} differs from the step's fixed handler, queue, priority or input"
    left = link_max_attempts(budget=budget, previous=previous)
    if task.max_attempts != left:
        return f"task {task.id} has max_attempts {task.max_attempts}, not the {left} left"
    return None


def _handler_check(history: StepHistory, first: Task) -> None:
    handler = history.spec.get("handler")
    if handler is not None and first.handler != handler:
        raise Unavailable(f"task {first.id} does not run the step's fixed handler")


def _counted_chain(ctx: Context, history: StepHistory, chain: Chain) -> bool:
    """A counted TASK step's chain from its ends: its last link checked as ``_link_problem`` checks every
    link (against the previous activation's task) and the attempts from the step's counter. False when
    anything disagrees: the caller then checks every link."""
    n, previous, first = history.activation_count, chain.previous, chain.original
    before = history.tasks.filter(source_activation__sequence=n - 1).first() if n > 1 else None
    rows = ctx.ahead.attempt_rows.pop(previous.id, None)
    if rows is None:
        rows = Attempt.objects.filter(task_id=previous.id).count()
    if (n > 1 and before is None) or _link_problem(previous, rows, before, first, chain.budget):
        return False
    # Each retry got what its chain left, so the attempts before it are what its max_attempts lacks.
    if history.step.attempts_before != chain.budget - previous.max_attempts:
        return False
    _handler_check(history, first)
    # A retry is only created for a chain whose tasks all FAILED or were CANCELLED: only the last may differ.
    chain.answered = None if previous.state in RETRYABLE_TASK_STATES else previous
    chain.attempts_used = history.step.attempts_before + previous.attempt_count
    chain.activations = n
    return True


def _task_chain(ctx: Context, history: StepHistory) -> Chain:
    """A TASK step's chain is every task of the step in activation order, checked in SQL, never loaded."""
    step, tasks = history.step, history.tasks
    chain = Chain(business_round=None, budget=attempt_budget(spec=history.spec, activation=history.current))
    n = history.activation_count
    if history.counted and history.first is not None and history.current is not None:
        # A counted history's first and current activations are its sequences 1 and n (unique per step).
        ends = {1: history.first.task_id, n: history.current.task_id}
    else:
        ends = dict(history.activations.filter(sequence__in=[1, n]).values_list("sequence", "task_id"))
    loaded = ctx.rows(Level.TASK, ends.values())
    if history.counted and ends.get(1) in loaded and ends.get(n) in loaded:
        chain.original, chain.previous = loaded[ends[1]], loaded[ends[n]]
        if _counted_chain(ctx, history, chain):
            return chain
    counts = history.counts_verify(ctx)
    if not counts["n"] == counts["sources"] == n:
        raise Unavailable(f"the activations and tasks of step {step.key!r} do not pair up")
    chain.original, chain.previous = loaded[ends[1]], loaded[ends[n]]
    bad = _broken_links(tasks, step, chain).first()
    if bad is not None:
        previous = tasks.filter(source_activation__sequence=bad.sequence - 1).first()
        raise Unavailable(_link_problem(bad, bad.rows, previous, chain.original, chain.budget))
    _handler_check(history, chain.original)
    if counts["retryable"] != counts["n"]:
        answered = tasks.exclude(state__in=RETRYABLE_TASK_STATES)
        chain.answered = answered.order_by("source_activation__sequence").first()
    chain.attempts_used = counts["attempts"]  # the attempt rows, now that each count matches its rows
    chain.activations = n
    return chain


def _broken_links(tasks: QuerySet[Task], step: Step, chain: Chain) -> QuerySet[Task]:
    """The tasks where ``_link_problem`` finds something, in chain order: the same rules in SQL, with the
    task of the previous activation as the predecessor."""
    first = chain.original
    rows = Attempt.objects.filter(task_id=OuterRef("pk")).values("task_id").annotate(n=Count("id")).values("n")
    links = tasks.annotate(sequence=F("source_activation__sequence"), rows=Coalesce(Subquery(rows), 0))
    links = links.alias(**{f"exact_{name}": exact(name) for name in TEXT_TASK_FIELDS})
    same = Q(
        **{(f"exact_{name}" if name in TEXT_TASK_FIELDS else name): getattr(first, name) for name in FIXED_TASK_FIELDS}
    )
    linked = Task.objects.filter(
        pk=OuterRef("retry_of_id"),
        source_activation__step_id=step.id,
        source_activation__sequence=OuterRef("sequence") - 1,
    )
    budget = Q(sequence=1, max_attempts=chain.budget) | Q(sequence__gt=1) & predecessor_left_exactly(linked)
    sound = Case(
        When(Q(rows=F("attempt_count")) & same & budget, then=True), default=False, output_field=BooleanField()
    )
    return links.alias(sound=sound).filter(sound=False).order_by("sequence")


def _round_chain(ctx: Context, history: StepHistory) -> Chain:
    """A POLL step's chain is the few query tasks of one business round: loaded and checked in order."""
    current = history.current
    chain = Chain(business_round=None, budget=attempt_budget(spec=history.spec, activation=current))
    if current is not None:
        chain.business_round = history.rounds.filter(activation_id=current.id).aggregate(n=Max("round"))["n"]
    if not chain.business_round:
        return chain
    rounds = list(history.rounds.filter(round=chain.business_round).values_list("activation_id", "task_id"))
    loaded = ctx.rows(Level.TASK, [task_id for _, task_id in rounds])
    tasks = sorted((loaded[task_id] for _, task_id in rounds), key=lambda t: (t.created_at, t.pk))
    rows = dict(
        Attempt.objects.filter(task_id__in=loaded).values("task_id").annotate(n=Count("id")).values_list("task_id", "n")
    )
    previous = None
    for task in tasks:
        problem = _link_problem(task, rows.get(task.id, 0), previous, tasks[0], chain.budget)
        if problem:
            raise Unavailable(problem)
        previous = task
    _handler_check(history, tasks[0])
    chain.original, chain.previous = tasks[0], tasks[-1]
    chain.answered = next((t for t in tasks if t.state not in RETRYABLE_TASK_STATES), None)
    chain.attempts_used = sum(rows.get(t.id, 0) for t in tasks)
    chain.activations = len({activation_id for activation_id, _ in rounds})
    return chain


class RetryStep(Operation):
    """Re-run a failed or cancelled TASK/POLL step in a new activation, within the original budget.

    Refused for a succeeded step, a stop intent, a passed instance or original task deadline or
    latest start, unsettled history, a spent budget (FAILED_PRECONDITION), a broken history
    (UNAVAILABLE) and a full application or queue quota (RESOURCE_EXHAUSTED, checked last).
    The instance stays in review with the gate closed until Continue.
    """

    name = "retry-step"
    title = "Retry step"
    target = "step"
    step_kinds = (StepKind.TASK, StepKind.POLL)
    command_class = RetryStepCommand
    takes_quota = True
    bulk = "Retry one step on selected instances"

    def check(self, ctx: Context, command: RetryStepCommand) -> RetryPlan | RearmPlan:
        history = step_decision_resolve(ctx, command)
        step, current = history.step, history.current
        if step.kind not in self.step_kinds:
            raise FailedPrecondition(f"RetryStep applies to TASK and POLL steps; {step.key!r} is {step.kind}")
        chain = _task_chain(ctx, history) if step.kind == StepKind.TASK else _round_chain(ctx, history)
        step_reviewable(history)
        if step.state == StepState.SUCCEEDED or step_conclusion(step) == "SUCCEEDED":
            raise FailedPrecondition(f"step {step.key!r} succeeded: a succeeded step is never re-run")
        instance = ctx.instance
        if instance.stop_kind:
            raise FailedPrecondition(f"the instance has a {instance.stop_kind} stop intent: no new work starts")
        if instance.deadline_at is not None and instance.deadline_at <= ctx.now:
            raise FailedPrecondition("the instance deadline has passed: no new work starts")
        if step.kind == StepKind.POLL and current.wait_id:
            return _final_signal_plan(ctx, history)
        if chain.original is None:
            raise FailedPrecondition("the current activation has not queried any round: nothing to retry")
        _deadline_checks(ctx, chain.original)
        problem = history.unsettled
        if problem:
            raise FailedPrecondition(problem)
        if current.last_round_classification:
            raise FailedPrecondition(
                f"round {chain.business_round} was classified {current.last_round_classification}: "
                "it is never re-queried"
            )
        if chain.answered is not None:
            raise FailedPrecondition(f"task {chain.answered.id} is {chain.answered.state}: resolve the step instead")
        budget = Budget(total=chain.budget, used=chain.attempts_used, activations=chain.activations)
        problem = budget.refusal()
        if problem:
            raise FailedPrecondition(problem)
        return RetryPlan(
            history=history,
            previous=chain.previous,
            original=chain.original,
            business_round=chain.business_round,
            attempts_used=budget.used,
            remaining=budget.remaining,
            quota=quota_take(ctx, chain.previous),
        )

    def apply(self, ctx: Context, command: RetryStepCommand, plan, *, operation_id: str) -> Effect:
        if isinstance(plan, RearmPlan):
            return wait_generation_next(ctx, history=plan.history, wait=plan.wait)
        history, previous = plan.history, plan.previous
        step, current = history.step, history.current
        before = {"step": step_snapshot(step), "activation": activation_snapshot(current)}
        application, queue = plan.quota
        created = activation_retry(
            locks=ctx.locks,
            application=application,
            queue=queue,
            instance=ctx.instance,
            step=step,
            spec=history.spec,
            current=current,
            first=history.first,
            previous=previous,
            original=plan.original,
            max_attempts=plan.remaining,
            business_round=plan.business_round,
            attempts_used=plan.attempts_used,
            now=ctx.now,
        )
        if created is None:
            raise AssertionError("the quota was checked under the same locks: a permit must be free")
        activation, task = created
        after = {
            "step": step_snapshot(step),
            "activation": activation_snapshot(current),
            "new_activation": activation_snapshot(activation),
            "new_task": task_snapshot(task) | {"retry_of": previous.id},
        }
        return Effect(before=before, after=after, step_key=step.key, activation=activation, task_id=task.id)


def _final_signal_plan(ctx: Context, history: StepHistory) -> RearmPlan:
    """A POLL step whose final-signal wait broke: a new wait generation, the answered round never re-queried."""
    current = history.current
    problem = history.unsettled
    if problem:
        raise FailedPrecondition(problem)
    if current.last_round_classification != "SUCCEEDED":
        raise FailedPrecondition("a final-signal wait follows only a SUCCEEDED classification")
    wait = wait_rearmable(ctx, history)
    if wait.kind != WaitKind.POLL_FINAL_SIGNAL:
        raise Unavailable(f"activation {current.id} of a POLL step waits on a {wait.kind} wait")
    return RearmPlan(history=history, wait=wait, now=ctx.now)


def _deadline_checks(ctx: Context, original: Task) -> None:
    if original.deadline_at is not None and original.deadline_at <= ctx.now:
        raise FailedPrecondition(
            f"the original task's deadline {format_optional_time(original.deadline_at)} has passed"
        )
    if original.latest_start_at is not None and original.latest_start_at <= ctx.now:
        raise FailedPrecondition(
            f"the original task's latest start {format_optional_time(original.latest_start_at)} has passed"
        )


RETRY_STEP = RetryStep()

step_retry = RETRY_STEP.service
