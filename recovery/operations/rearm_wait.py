"""RearmWait: a new wait generation for a standalone SIGNAL or TIMER step in review.

The new activation's wait keeps the contract, correlation key, deadline and TIMER fire_at: a
deadline is never extended. The old wait is SUPERSEDED with its winner kept; unconsumed signals
of the step stay PENDING for the new generation. POLL steps are refused (RetryStep recovers
their final-signal wait). The instance review stays.
"""

from dataclasses import dataclass

from core.errors import FailedPrecondition, Unavailable
from core.identity import Identity
from core.times import format_optional_time
from engine.activation import wait_supersede
from history.idempotency import Receipt
from history.models import ActivationState, StepKind, StepState, Wait, WaitState
from recovery.commands import RearmWaitCommand
from recovery.common import (
    Context,
    Effect,
    Operation,
    Plan,
    StepHistory,
    activation_snapshot,
    change,
    operation_execute,
    step_conclusion,
    step_decision_resolve,
    step_snapshot,
)


@dataclass
class RearmPlan(Plan):
    history: StepHistory
    wait: Wait

    def preview(self) -> dict:
        step, current, wait = self.history.step, self.history.current, self.wait
        return {
            "step_key": step.key,
            "step": {"state": change(step.state, StepState.WAITING)},
            "activation": {"id": current.id, "state": change(current.state, ActivationState.SUPERSEDED)},
            "new_activation": {"sequence": current.sequence + 1, "state": ActivationState.WAITING},
            "wait": {
                "id": wait.id,
                "state": change(wait.state, WaitState.SUPERSEDED),
                "winner_signal_id": wait.winner_signal_id,
            },
            "new_wait": {"generation": wait.generation + 1, "state": WaitState.WAITING},
            "deadlines_kept": {
                "deadline_at": format_optional_time(wait.deadline_at),
                "fire_at": format_optional_time(wait.fire_at),
            },
        }


def wait_snapshot(wait: Wait) -> dict:
    return {
        "id": wait.id,
        "generation": wait.generation,
        "state": wait.state,
        "deadline_at": format_optional_time(wait.deadline_at),
        "fire_at": format_optional_time(wait.fire_at),
        "winner_signal_id": wait.winner_signal_id,
    }


def wait_rearmable(ctx: Context, history: StepHistory) -> Wait:
    """The current activation's wait, in review and before its original deadline."""
    current = history.current
    wait = history.wait
    if wait is None:
        raise Unavailable(f"activation {current.id} of a {history.step.kind} step has no wait")
    if wait.state != WaitState.NEEDS_REVIEW:
        raise FailedPrecondition(f"wait generation {wait.generation} is {wait.state}, not NEEDS_REVIEW")
    if wait.deadline_at <= ctx.now:
        raise FailedPrecondition(
            f"the wait's deadline {format_optional_time(wait.deadline_at)} has passed; it is never extended"
        )
    return wait


def wait_generation_next(ctx: Context, *, history: StepHistory, wait: Wait, **carried) -> Effect:
    """The engine's next wait generation for the step, with the before and after of each row it changed."""
    step, current = history.step, history.current
    before = {"step": step_snapshot(step), "activation": activation_snapshot(current), "wait": wait_snapshot(wait)}
    activation, new_wait = wait_supersede(
        instance=ctx.instance, step=step, activation=current, wait=wait, now=ctx.now, carried=carried
    )
    after = {
        "step": step_snapshot(step),
        "activation": activation_snapshot(current),
        "wait": wait_snapshot(wait),
        "new_activation": activation_snapshot(activation),
        "new_wait": wait_snapshot(new_wait),
    }
    return Effect(before=before, after=after, step_key=step.key, activation=activation)


class RearmWait(Operation):
    name = "rearm-wait"
    action = "workflow.rearm_wait"
    command_class = RearmWaitCommand

    def check(self, ctx: Context, command: RearmWaitCommand) -> RearmPlan:
        history = step_decision_resolve(ctx, command)
        step, current = history.step, history.current
        if step.kind == StepKind.POLL:
            raise FailedPrecondition("a POLL step's final-signal wait is recovered by RetryStep, not RearmWait")
        if step.kind not in (StepKind.SIGNAL, StepKind.TIMER):
            raise FailedPrecondition(f"RearmWait applies to SIGNAL and TIMER steps; {step.key!r} is {step.kind}")
        if step.state == StepState.SUCCEEDED or step_conclusion(step) == "SUCCEEDED":
            raise FailedPrecondition(f"step {step.key!r} succeeded: a succeeded step is never re-run")
        if current.state != ActivationState.NEEDS_REVIEW:
            raise FailedPrecondition(f"activation {current.sequence} is {current.state}, not NEEDS_REVIEW")
        return RearmPlan(history=history, wait=wait_rearmable(ctx, history))

    def apply(self, ctx: Context, command: RearmWaitCommand, plan: RearmPlan, *, operation_id: str) -> Effect:
        return wait_generation_next(ctx, history=plan.history, wait=plan.wait)


REARM_WAIT = RearmWait()


def wait_rearm(
    *, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str = ""
) -> Receipt:
    """Give a SIGNAL or TIMER step in review a new wait generation before its original deadline.

    Needs wait_verified=true. Keeps contract, correlation key, deadline and fire_at; supersedes the
    old activation and wait (its winner kept); leaves unconsumed signals PENDING; refuses POLL steps.
    """
    return operation_execute(
        operation=REARM_WAIT,
        identity=identity,
        instance_id=instance_id,
        idempotency_key=idempotency_key,
        command=command,
        request_id=request_id,
    )
