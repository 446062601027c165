"""ResolveStep: save a management conclusion on a step's current activation.

The step's whole history must be owned both ways and known settled. Pulse results, attempts,
events, waits and poll rounds are never rewritten; the instance review and any stop intent stay.
"""

from dataclasses import dataclass

from core.errors import FailedPrecondition, InvalidArgument
from core.identity import Identity
from engine.state import touch
from history.idempotency import Receipt
from history.models import ActivationState, StepKind
from recovery.commands import ResolveStepCommand
from recovery.common import (
    Context,
    Effect,
    Operation,
    Plan,
    StepHistory,
    activation_snapshot,
    change,
    operation_execute,
    step_decision_resolve,
    step_snapshot,
)
from recovery.contracts import poll_classify, result_contract_check

REVIEWABLE_ACTIVATION_STATES = (ActivationState.NEEDS_REVIEW, ActivationState.FAILED, ActivationState.CANCELLED)


@dataclass
class ResolvePlan(Plan):
    history: StepHistory
    conclusion: str

    def preview(self) -> dict:
        step, current = self.history.step, self.history.current
        return {
            "step_key": step.key,
            "step": {
                "state": change(step.state, self.conclusion),
                "revision": change(str(step.revision), str(step.revision + 1)),
            },
            "activation": {
                "id": current.id,
                "sequence": current.sequence,
                "state": change(current.state, self.conclusion),
            },
        }


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


def _success_checks(ctx: Context, history: StepHistory, command: ResolveStepCommand) -> None:
    spec, result = history.spec, command.result
    if history.step.kind == StepKind.TIMER:
        if not result.is_null:
            raise InvalidArgument("a TIMER step succeeds with an explicit null result", field="result")
        wait = history.wait
        if wait is None or wait.fire_at is None or wait.fire_at > ctx.now:
            raise FailedPrecondition("the timer's original duration has not elapsed yet")
        return
    result_contract_check(spec=spec, result=result)
    if history.step.kind == StepKind.POLL and poll_classify(spec=spec, result=result) != "SUCCEEDED":
        raise InvalidArgument("result does not classify as SUCCEEDED under the step's fixed mapping", field="result")


class ResolveStep(Operation):
    name = "resolve-step"
    action = "workflow.resolve_step"
    command_class = ResolveStepCommand

    def check(self, ctx: Context, command: ResolveStepCommand) -> ResolvePlan:
        history = step_decision_resolve(ctx, command)
        step_reviewable(history)
        if command.conclusion == "SUCCEEDED":
            _success_checks(ctx, history, command)
        return ResolvePlan(history=history, conclusion=command.conclusion)

    def apply(self, ctx: Context, command: ResolveStepCommand, plan: ResolvePlan, *, operation_id: str) -> Effect:
        step, activation = plan.history.step, plan.history.current
        before = {"step": step_snapshot(step), "activation": activation_snapshot(activation)}
        resolution = {
            "conclusion": command.conclusion,
            "result_digest": command.result.digest,
            "operation_id": operation_id,
            "activation_id": activation.id,
            "actor_id": ctx.identity.actor_id,
        }
        touch(
            activation,
            ctx.now,
            state=command.conclusion,
            output=command.result.text,
            resolution=resolution,
            completed_at=activation.completed_at or ctx.now,
        )
        touch(step, ctx.now, state=command.conclusion, output=command.result.text, resolution=resolution)
        after = {
            "step": step_snapshot(step) | {"output": None, "result_digest": command.result.digest},
            "activation": activation_snapshot(activation) | {"output": None},
        }
        return Effect(before=before, after=after, step_key=step.key, activation=activation)


RESOLVE_STEP = ResolveStep()


def step_resolve(
    *, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str = ""
) -> Receipt:
    """Conclude a step's current activation SUCCEEDED or FAILED with a result of its fixed contract.

    Refused unless every historical task of the step is owned both ways and known settled; a
    POLL success must classify SUCCEEDED, a TIMER success needs its duration elapsed and a null
    result. The instance stays in review and a stop intent is kept.
    """
    return operation_execute(
        operation=RESOLVE_STEP,
        identity=identity,
        instance_id=instance_id,
        idempotency_key=idempotency_key,
        command=command,
        request_id=request_id,
    )
