"""ResolveStep: save a management conclusion on a step's current activation.

The step's whole history must be owned both ways and known settled. Pulse results, attempts,
events, waits and poll rounds are never rewritten; the instance review and any stop intent stay.
"""

from dataclasses import dataclass
from types import MappingProxyType

from core.errors import FailedPrecondition, InvalidArgument
from engine.state import step_conclude
from history.audits import activation_snapshot, step_snapshot
from history.models import StepKind
from recovery.commands import EXECUTION_SETTLED, NOT_NULL, ExactResult, StepDecision
from recovery.context import Context
from recovery.contracts import poll_classify, result_contract_check
from recovery.pipeline import Effect, Operation, Plan, change
from recovery.step_history import StepHistory, step_decision_resolve, step_reviewable


@dataclass(frozen=True)
class ResolveStepCommand(StepDecision):
    declaration = EXECUTION_SETTLED
    variants = MappingProxyType(
        {"Succeeded": {"conclusion": "SUCCEEDED"}, "Failed": {"conclusion": "FAILED", "result": NOT_NULL}}
    )

    execution_settled: bool
    conclusion: str
    result: ExactResult

    def check_combination(self) -> None:
        # A SUCCEEDED result is checked against the step's fixed contract once the step is known.
        if self.conclusion == "FAILED" and self.result.is_null:
            raise InvalidArgument(
                "a FAILED conclusion needs a result other than null (the failure details)", field="result"
            )


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
    """Conclude a step's current activation SUCCEEDED or FAILED with a result of its fixed contract.

    Refused unless every historical task of the step is owned both ways and known settled; a
    POLL success must classify SUCCEEDED, a TIMER success needs its duration elapsed and a null
    result. The instance stays in review and a stop intent is kept.
    """

    name = "resolve-step"
    title = "Resolve step"
    target = "step"
    command_class = ResolveStepCommand
    concludes_by_hand = True
    # Judged as a FAILED conclusion: a SUCCEEDED one also needs a result of the step's contract.
    preview_defaults = MappingProxyType(
        {"conclusion": "FAILED", "result": ExactResult(text='"preview"', value="preview")}
    )

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
        step_conclude(
            step=step,
            activation=activation,
            conclusion=command.conclusion,
            output=command.result.text,
            resolution=resolution,
            now=ctx.now,
        )
        after = {
            "step": step_snapshot(step) | {"output": None, "result_digest": command.result.digest},
            "activation": activation_snapshot(activation) | {"output": None},
        }
        return Effect(before=before, after=after, step_key=step.key, activation=activation)


RESOLVE_STEP = ResolveStep()

step_resolve = RESOLVE_STEP.service
