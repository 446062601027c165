"""Continue: lift the instance review when the server's own checks allow it.

review_resolved is only the operator's word: the server still requires no step in review, no
failed or cancelled step without a conclusion, no task in review, no UNKNOWN attempt without a
review and a clean inbox. Then, in order: a stop intent → CANCELLING (a later success never
revokes a stop); a step concluded FAILED → stop_kind FAIL, CANCELLING; a passed instance
deadline → refused; else RUNNING with the gate open unless paused, and a root continuation.
"""

from dataclasses import dataclass

from core.errors import FailedPrecondition
from engine.advance import continuation_create
from engine.state import instance_review_lift
from history.models import (
    Attempt,
    AttemptState,
    InstanceState,
    Step,
    StepState,
    StopKind,
    Task,
    TaskState,
)
from recovery.commands import Command, Declaration
from recovery.context import Context
from recovery.pipeline import Effect, Operation, Plan
from recovery.repairs import repair_watch
from recovery.step_history import step_conclusion

CONTINUATION_KIND = "CONTINUE"


@dataclass(frozen=True)
class ContinueCommand(Command):
    declaration = Declaration(
        "review_resolved",
        asserts="every matter of this review has been handled",
        wording="Every matter of this review has been handled.",
    )

    review_resolved: bool


@dataclass
class ContinuePlan(Plan):
    stop_kind: str | None
    stop_reason: str
    instance_state: str
    gate_open: bool

    def preview(self) -> dict:
        preview = {"stop_kind": self.stop_kind}
        if self.instance_state == InstanceState.RUNNING:
            preview["root_continuation"] = CONTINUATION_KIND
        return preview


def _review_matters_left(ctx: Context, steps: list[Step]) -> str | None:
    """The first matter of this review still open, in words, or None."""
    for step in steps:
        if step.state == StepState.NEEDS_REVIEW:
            return f"step {step.key!r} is NEEDS_REVIEW"
        if step.state in (StepState.FAILED, StepState.CANCELLED) and step_conclusion(step) is None:
            return f"step {step.key!r} is {step.state} without a conclusion: resolve or retry it"
    instance_id = ctx.instance.id
    task_id = (
        Task.objects.filter(source_instance_id=instance_id, state=TaskState.NEEDS_REVIEW)
        .values_list("id", flat=True)
        .first()
    )
    if task_id:
        return f"task {task_id} is NEEDS_REVIEW: review it first"
    unknown = (
        Attempt.objects.filter(
            task__source_instance_id=instance_id, state=AttemptState.UNKNOWN, task__review_conclusion=""
        )
        .values_list("task_id", flat=True)
        .first()
    )
    if unknown:
        return f"task {unknown} has an UNKNOWN attempt that was never reviewed"
    return None


class Continue(Operation):
    """Lift the review of an instance whose every matter is handled (review_resolved=true).

    A stop intent or a step concluded FAILED hands the instance to the stop path (CANCELLING,
    gate closed); a passed deadline is refused; otherwise RUNNING, the gate open unless paused
    (paused stays), a root continuation saved, deadlines unchanged.
    """

    name = "continue"
    title = "Continue instance"
    target = "instance"
    command_class = ContinueCommand
    bulk = "Continue selected instances"

    def check(self, ctx: Context, command: ContinueCommand) -> ContinuePlan:
        ctx.require_revision(command.expected_revision)
        instance = ctx.instance
        steps = ctx.instance_steps()
        problem = _review_matters_left(ctx, steps)
        if problem:
            raise FailedPrecondition(problem)
        if instance.stop_kind:
            return ContinuePlan(instance.stop_kind, instance.stop_reason, InstanceState.CANCELLING, False)
        failed = [s.key for s in steps if s.state == StepState.FAILED and step_conclusion(s) == "FAILED"]
        if failed:
            return ContinuePlan(StopKind.FAIL, f"step {failed[0]!r} concluded FAILED", InstanceState.CANCELLING, False)
        if instance.deadline_at is not None and instance.deadline_at <= ctx.now:
            raise FailedPrecondition(
                "the instance deadline has passed: cancel it instead; deadlines are never extended"
            )
        return ContinuePlan(None, "", InstanceState.RUNNING, not instance.paused)

    def apply(self, ctx: Context, command: ContinueCommand, plan: ContinuePlan, *, operation_id: str) -> Effect:
        instance = ctx.instance
        lifted = (instance.review_cause, instance.review_step_key)
        instance_review_lift(
            instance=instance,
            gate=ctx.gate,
            state=plan.instance_state,
            stop_kind=plan.stop_kind,
            stop_reason=plan.stop_reason,
        )
        after = {}
        if plan.instance_state == InstanceState.RUNNING:
            continuation = continuation_create(instance=instance, kind=CONTINUATION_KIND, now=ctx.now)
            after["root_continuation_id"] = continuation.id
            # It runs on: whether the repair worked is judged from here (a stopping instance has nothing to prove).
            cause, step_key = lifted
            repair_watch(
                instance=instance,
                definition=ctx.definition,
                cause=cause,
                step_key=step_key,
                operation_id=operation_id,
                now=ctx.now,
            )
        return Effect(before={}, after=after)


CONTINUE = Continue()

instance_continue = CONTINUE.service
