"""RearmWait: a new wait generation for a standalone SIGNAL or TIMER step in review.

The new activation's wait keeps the contract, correlation key, deadline and TIMER fire_at: a
deadline is never extended. The old wait is SUPERSEDED with its winner kept; a signal of the
step that stayed PENDING (buffered while the wait was in review) is matched by the new generation
in the same transaction, oldest first: the step may succeed at once, or return to review when the
payload breaks the contract. POLL steps are refused (RetryStep recovers their final-signal wait).
The instance review stays.
"""

from dataclasses import dataclass

from core.errors import FailedPrecondition
from history.models import ActivationState, StepKind, StepState
from recovery.commands import Declaration, StepDecision
from recovery.context import Context
from recovery.pipeline import Effect, Operation
from recovery.step_history import step_conclusion, step_decision_resolve
from recovery.wait_generation import RearmPlan, wait_generation_next, wait_rearmable


@dataclass(frozen=True)
class RearmWaitCommand(StepDecision):
    declaration = Declaration(
        "wait_verified",
        asserts="the awaited event has not happened and the contract is still right",
        wording=(
            "The awaited event has not happened (or the timer must still fire) "
            "and the original contract is still right."
        ),
    )

    wait_verified: bool


class RearmWait(Operation):
    """Give a SIGNAL or TIMER step in review a new wait generation before its original deadline.

    Needs wait_verified=true. Keeps contract, correlation key, deadline and fire_at; supersedes the
    old activation and wait (its winner kept); the new generation takes the oldest matching buffered
    signal at once; refuses POLL steps.
    """

    name = "rearm-wait"
    title = "Rearm wait"
    target = "step"
    step_kinds = (StepKind.SIGNAL, StepKind.TIMER)
    command_class = RearmWaitCommand

    def check(self, ctx: Context, command: RearmWaitCommand) -> RearmPlan:
        history = step_decision_resolve(ctx, command)
        step, current = history.step, history.current
        if step.kind == StepKind.POLL:
            raise FailedPrecondition("a POLL step's final-signal wait is recovered by RetryStep, not RearmWait")
        if step.kind not in self.step_kinds:
            raise FailedPrecondition(f"RearmWait applies to SIGNAL and TIMER steps; {step.key!r} is {step.kind}")
        if step.state == StepState.SUCCEEDED or step_conclusion(step) == "SUCCEEDED":
            raise FailedPrecondition(f"step {step.key!r} succeeded: a succeeded step is never re-run")
        if current.state != ActivationState.NEEDS_REVIEW:
            raise FailedPrecondition(f"activation {current.sequence} is {current.state}, not NEEDS_REVIEW")
        return RearmPlan(history=history, wait=wait_rearmable(ctx, history), now=ctx.now)

    def apply(self, ctx: Context, command: RearmWaitCommand, plan: RearmPlan, *, operation_id: str) -> Effect:
        return wait_generation_next(ctx, history=plan.history, wait=plan.wait)


REARM_WAIT = RearmWait()

wait_rearm = REARM_WAIT.service
