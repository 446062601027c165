"""RetryStep: a new activation and task for a TASK or POLL step, within the original budget (SPEC §5.3).

TASK: the new task gets what is left of the definition's max_attempts after every attempt of
every historical task of the step; the activations of the step never outnumber max_attempts.
POLL: the same business round is re-queried with what is left of its attempts_per_round; a new
business round is never opened, and a round already classified is never re-queried. A POLL step
whose final-signal wait broke gets a new wait generation instead (no query, no task).
The new task inherits the original deadline, latest start, exact input and business keys, is
charged to the original task's application and queue, and waits behind the closed gate.
"""

from dataclasses import dataclass

from history.errors import FailedPrecondition, Unavailable
from history.identity import Identity
from history.ids import new_id
from history.models import (
    Activation,
    ActivationState,
    PollRound,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    WaitKind,
)
from recovery.commands import RetryStepCommand
from recovery.common import (
    Context,
    Effect,
    Operation,
    Plan,
    StepHistory,
    activation_snapshot,
    bump,
    change,
    operation_execute,
    quota_adjust,
    quota_take,
    rfc3339,
    step_conclusion,
    step_decision_resolve,
    step_snapshot,
    task_snapshot,
)
from recovery.operations.rearm_wait import RearmPlan, wait_generation_next, wait_rearmable
from recovery.operations.resolve_step import step_reviewable
from recovery.receipts import Receipt

RETRYABLE_TASK_STATES = (TaskState.FAILED, TaskState.CANCELLED)


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
                "state": change(current.state, _old_activation_state(current)),
            },
            "new_activation": {"sequence": current.sequence + 1, "state": ActivationState.ACTIVE},
            "new_task": {"retry_of": self.previous.id, "state": TaskState.QUEUED, "max_attempts": self.remaining},
            "attempt_budget": {"used": self.attempts_used, "remaining": self.remaining},
            "deadlines_kept": {
                "deadline_at": rfc3339(self.original.deadline_at),
                "latest_start_at": rfc3339(self.original.latest_start_at),
            },
        }
        if self.business_round is not None:
            preview["new_activation"]["first_round"] = self.business_round
        return preview


def _old_activation_state(activation: Activation) -> str:
    if activation.state in (ActivationState.FAILED, ActivationState.CANCELLED):
        return activation.state
    return ActivationState.SUPERSEDED


def _chain_checks(history: StepHistory, chain: list[Task], budget: int) -> None:
    """The retry_of chain, attempt rows and fixed task fields agree (else corruption)."""
    first = chain[0]
    spent = 0
    for index, task in enumerate(chain):
        if len(history.attempts.get(task.id, ())) != task.attempt_count:
            raise Unavailable(f"task {task.id} counts {task.attempt_count} attempts but has other attempt rows")
        if index and task.retry_of_id != chain[index - 1].id:
            raise Unavailable(f"task {task.id} does not retry its predecessor {chain[index - 1].id}")
        fixed = ("handler", "queue_id", "application_id", "priority", "input", "business_key", "concurrency_key")
        if any(getattr(task, name) != getattr(first, name) for name in fixed):
            raise Unavailable(f"task {task.id} differs from the step's fixed handler, queue, priority or input")
        if task.max_attempts != budget - spent:
            raise Unavailable(f"task {task.id} has max_attempts {task.max_attempts}, not the {budget - spent} left")
        spent += task.attempt_count
    handler = history.spec.get("handler")
    if handler is not None and first.handler != handler:
        raise Unavailable(f"task {first.id} does not run the step's fixed handler")


def _chain_of(history: StepHistory) -> tuple[int | None, list[Task], int]:
    """The tasks the new one continues (TASK: all of the step; POLL: the current activation's last
    round across activations), verified, with the business round and the attempt budget they share."""
    current = history.current
    if history.step.kind == StepKind.TASK:
        by_activation = {t.source_activation_id: t for t in history.tasks.values()}
        chain = [by_activation[a.id] for a in history.activations if a.id in by_activation]
        if len(chain) != len(history.tasks) or len(chain) != len(history.activations):
            raise Unavailable(f"the activations and tasks of step {history.step.key!r} do not pair up")
        business_round, budget = None, history.spec.get("max_attempts", 1)
    else:
        business_round = history.last_round(current) if current else None
        chain = history.round_tasks(business_round) if business_round else []
        budget = (current.attempts_per_round if current else None) or 1
    if chain:
        _chain_checks(history, chain, budget)
    return business_round, chain, budget


def _activations_of(history: StepHistory, business_round: int | None) -> int:
    """Activations counted against the budget: all of a TASK step, those that ran the POLL round."""
    if business_round is None:
        return len(history.activations)
    return len({r.activation_id for r in history.rounds if r.round == business_round})


class RetryStep(Operation):
    name = "retry-step"
    action = "workflow.retry_step"
    command_class = RetryStepCommand

    def quota_task(self, *, identity: Identity, instance_id: str, command: RetryStepCommand) -> Task | None:
        step = Step.objects.filter(instance_id=instance_id, key=command.step_key).first()
        activation = Activation.objects.filter(pk=step.current_activation_id).first() if step else None
        task_id = (activation.task_id or activation.last_task_id) if activation else None
        return Task.objects.filter(pk=task_id, namespace_id=identity.namespace_id).first() if task_id else None

    def check(self, ctx: Context, command: RetryStepCommand) -> RetryPlan | RearmPlan:
        history = step_decision_resolve(ctx, command)
        step, current = history.step, history.current
        if step.kind not in (StepKind.TASK, StepKind.POLL):
            raise FailedPrecondition(f"RetryStep applies to TASK and POLL steps; {step.key!r} is {step.kind}")
        business_round, chain, budget = _chain_of(history)
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
        if not chain:
            raise FailedPrecondition("the current activation has not queried any round: nothing to retry")
        _deadline_checks(ctx, chain[0])
        problem = history.unsettled()
        if problem:
            raise FailedPrecondition(problem)
        if current.last_round_classification:
            raise FailedPrecondition(
                f"round {business_round} was classified {current.last_round_classification}: it is never re-queried"
            )
        answered = [t for t in chain if t.state not in RETRYABLE_TASK_STATES]
        if answered:
            raise FailedPrecondition(f"task {answered[0].id} is {answered[0].state}: resolve the step instead")
        used = history.attempts_used(t.id for t in chain)
        if budget - used <= 0:
            raise FailedPrecondition(f"the attempt budget is spent: {used} of {budget} attempts used")
        activations = _activations_of(history, business_round)
        if activations >= budget:
            raise FailedPrecondition(f"{activations} of at most {budget} activations already ran")
        return RetryPlan(
            history=history,
            previous=chain[-1],
            original=chain[0],
            business_round=business_round,
            attempts_used=used,
            remaining=budget - used,
            quota=quota_take(ctx, chain[-1]),
        )

    def apply(self, ctx: Context, command: RetryStepCommand, plan, *, operation_id: str) -> Effect:
        if isinstance(plan, RearmPlan):
            current = plan.history.current
            kept = {name: getattr(current, name) for name in FINAL_SIGNAL_KEPT}
            return wait_generation_next(ctx, history=plan.history, wait=plan.wait, **kept)
        history, previous, original = plan.history, plan.previous, plan.original
        step, current, first = history.step, history.current, history.first
        before = {"step": step_snapshot(step), "activation": activation_snapshot(current)}
        activation_id, task_id = new_id(), new_id()
        is_poll = step.kind == StepKind.POLL
        activation = Activation.objects.create(
            id=activation_id,
            step=step,
            instance=ctx.instance,
            sequence=current.sequence + 1,
            state=ActivationState.ACTIVE,
            task_id=None if is_poll else task_id,
            input=first.input,
            deadline_at=first.deadline_at,
            latest_start_at=first.latest_start_at,
            created_at=ctx.now,
            updated_at=ctx.now,
            **(_poll_fields(current, plan, task_id) if is_poll else {}),
        )
        task = Task.objects.create(
            id=task_id,
            namespace_id=previous.namespace_id,
            application_id=previous.application_id,
            queue_id=previous.queue_id,
            handler=previous.handler,
            priority=previous.priority,
            input=previous.input,
            business_key=previous.business_key,
            concurrency_key=previous.concurrency_key,
            state=TaskState.QUEUED,
            max_attempts=plan.remaining,
            deadline_at=original.deadline_at,
            latest_start_at=original.latest_start_at,
            retry_of=previous,
            source_instance=ctx.instance,
            source_activation=activation,
            source_round=plan.business_round,
            permit_held=True,
            created_at=ctx.now,
            updated_at=ctx.now,
        )
        if is_poll:
            PollRound.objects.create(
                activation=activation, instance=ctx.instance, round=plan.business_round, task=task, created_at=ctx.now
            )
        quota_adjust(plan.quota, +1)
        if _old_activation_state(current) != current.state:
            bump(current, now=ctx.now, state=ActivationState.SUPERSEDED)
        bump(step, now=ctx.now, state=StepState.ACTIVE, current_activation=activation)
        after = {
            "step": step_snapshot(step),
            "activation": activation_snapshot(current),
            "new_activation": activation_snapshot(activation),
            "new_task": task_snapshot(task) | {"retry_of": previous.id},
        }
        return Effect(before=before, after=after, step_key=step.key, activation=activation, task_id=task.id)


FINAL_SIGNAL_KEPT = (
    "first_round",
    "first_round_attempts_used",
    "used_rounds",
    "max_rounds",
    "attempts_per_round",
    "interval_seconds",
    "poll_deadline_at",
    "round_deadline_at",
    "last_round_classification",
)


def _final_signal_plan(ctx: Context, history: StepHistory) -> RearmPlan:
    """A POLL step whose final-signal wait broke: a new wait generation, the answered round never re-queried."""
    current = history.current
    problem = history.unsettled()
    if problem:
        raise FailedPrecondition(problem)
    if current.last_round_classification != "SUCCEEDED":
        raise FailedPrecondition("a final-signal wait follows only a SUCCEEDED classification")
    wait = wait_rearmable(ctx, history)
    if wait.kind != WaitKind.POLL_FINAL_SIGNAL:
        raise Unavailable(f"activation {current.id} of a POLL step waits on a {wait.kind} wait")
    return RearmPlan(history=history, wait=wait)


def _deadline_checks(ctx: Context, original: Task) -> None:
    if original.deadline_at is not None and original.deadline_at <= ctx.now:
        raise FailedPrecondition(f"the original task's deadline {rfc3339(original.deadline_at)} has passed")
    if original.latest_start_at is not None and original.latest_start_at <= ctx.now:
        raise FailedPrecondition(f"the original task's latest start {rfc3339(original.latest_start_at)} has passed")


def _poll_fields(current: Activation, plan: RetryPlan, task_id: str) -> dict:
    """The same business round, its frozen limits and deadlines; the used rounds do not change."""
    return {
        "first_round": plan.business_round,
        "first_round_attempts_used": plan.attempts_used,
        "used_rounds": current.used_rounds,
        "max_rounds": current.max_rounds,
        "attempts_per_round": current.attempts_per_round,
        "interval_seconds": current.interval_seconds,
        "poll_deadline_at": current.poll_deadline_at,
        "round_deadline_at": plan.original.deadline_at,
        "last_task_id": task_id,
    }


RETRY_STEP = RetryStep()


def step_retry(
    *, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str = ""
) -> Receipt:
    """Re-run a failed or cancelled TASK/POLL step in a new activation, within the original budget.

    Refused for a succeeded step, a stop intent, a passed instance or original task deadline or
    latest start, unsettled history, a spent budget (FAILED_PRECONDITION), a broken history
    (UNAVAILABLE) and a full application or queue quota (RESOURCE_EXHAUSTED, checked last).
    The instance stays in review with the gate closed until Continue.
    """
    return operation_execute(
        operation=RETRY_STEP,
        identity=identity,
        instance_id=instance_id,
        idempotency_key=idempotency_key,
        command=command,
        request_id=request_id,
    )
