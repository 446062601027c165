"""ReviewTask: record the verified outcome of a NEEDS_REVIEW task.

It settles the task (conclusion as its state, result, review conclusion, permit released) and
publishes a REVIEWED result event, last in the transaction. It never resolves the step nor
lifts the instance review: a verified query success answering PENDING is not a POLL success.
"""

from dataclasses import dataclass
from types import MappingProxyType

from core.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from core.ids import new_id
from engine.results import result_event_publish
from engine.worker import task_settle_reviewed
from history.audits import audit_write, task_snapshot
from history.locking import Level
from history.models import (
    Activation,
    Attempt,
    AttemptState,
    ExecutionAudit,
    ResultKind,
    StepKind,
    Task,
    TaskState,
)
from recovery.commands import EXECUTION_SETTLED, NOT_NULL, Command, ExactResult
from recovery.context import Context
from recovery.pipeline import Effect, Operation, Plan, change
from recovery.step_history import StepHistory, step_history


@dataclass
class ReviewPlan(Plan):
    history: StepHistory
    task: Task
    activation: Activation
    conclusion: str
    quota: tuple | None

    def preview(self) -> dict:
        return {
            "step_key": self.history.step.key,
            "task": {
                "id": self.task.id,
                "state": change(self.task.state, self.conclusion),
                "revision": change(str(self.task.revision), str(self.task.revision + 1)),
                "permit_held": change(self.task.permit_held, False),
            },
            "activation": {"id": self.activation.id, "state": change(self.activation.state, self.activation.state)},
            "result_event": "REVIEWED",
        }


def _task_under_instance(ctx: Context, task_id: str) -> Task:
    instance = ctx.instance
    task = ctx.row_where(Level.TASK, task_id, namespace_id=instance.namespace_id, source_instance_id=instance.id)
    if task is None:
        raise NotFound(f"no task {task_id} in this instance")
    return task


def _require_task_revision(task: Task, expected: int) -> None:
    if task.revision != expected:
        raise Aborted(f"expected_task_revision {expected} is stale: the task is at revision {task.revision}")


@dataclass(frozen=True)
class ReviewTaskCommand(Command):
    declaration = EXECUTION_SETTLED
    variants = MappingProxyType({"": {"result": NOT_NULL}})

    task_id: str
    expected_task_revision: int
    execution_settled: bool
    conclusion: str
    result: ExactResult

    def check_combination(self) -> None:
        if self.result.is_null:
            raise InvalidArgument("result must be a JSON value other than null", field="result")


class ReviewTask(Operation):
    """Record the operator's verified outcome of a NEEDS_REVIEW task of this instance.

    Needs workflows:recover, the current instance and task revisions and execution_settled=true.
    The task takes the conclusion, stores the result, releases its permit; an ExecutionAudit and a
    WorkflowOperation referencing it are written and a REVIEWED result event is published last.
    The step and the instance review are left as they are.
    """

    name = "review-task"
    title = "Review task"
    target = "task"
    # Only these steps have tasks.
    step_kinds = (StepKind.TASK, StepKind.POLL)
    command_class = ReviewTaskCommand
    preview_defaults = MappingProxyType({"conclusion": "SUCCEEDED", "result": ExactResult(text="true", value=True)})

    def check(self, ctx: Context, command: ReviewTaskCommand) -> ReviewPlan:
        seen = _task_under_instance(ctx, command.task_id)
        ctx.require_revision(command.expected_revision)
        _require_task_revision(seen, command.expected_task_revision)
        source = ctx.row_where(Level.ACTIVATION, seen.source_activation_id, instance_id=ctx.instance.id)
        step = ctx.row_where(Level.STEP, source.step_id, instance_id=ctx.instance.id) if source else None
        if step is None:
            raise Unavailable(f"task {seen.id} names a source activation that is not in this instance")
        history = step_history(ctx, step)
        task = ctx.rows(Level.TASK, [seen.id])[seen.id]
        _require_task_revision(task, command.expected_task_revision)
        if task.state != TaskState.NEEDS_REVIEW:
            raise FailedPrecondition(f"task {task.id} is {task.state}; only a NEEDS_REVIEW task can be reviewed")
        running = ctx.ahead.running.pop(task.id, None)
        if running is None:
            running = Attempt.objects.filter(task_id=task.id, state=AttemptState.RUNNING).exists()
        if running:
            raise FailedPrecondition(f"task {task.id} has a RUNNING attempt: its execution has not ended")
        quota = ctx.quota_rows(task) if task.permit_held else None
        if quota is not None and any(row.active_tasks < 1 for row in quota):
            raise Unavailable(f"task {task.id} holds a permit its application or queue does not count")
        return ReviewPlan(history=history, task=task, activation=source, conclusion=command.conclusion, quota=quota)

    def apply(self, ctx: Context, command: ReviewTaskCommand, plan: ReviewPlan, *, operation_id: str) -> Effect:
        task = plan.task
        before = task_snapshot(task)
        application, queue = plan.quota or (None, None)
        task_settle_reviewed(
            locks=ctx.locks,
            task=task,
            conclusion=command.conclusion,
            result=command.result.text,
            now=ctx.now,
            application=application,
            queue=queue,
        )
        after = task_snapshot(task) | {"result_digest": command.result.digest}
        execution_audit = audit_write(
            model=ExecutionAudit,
            namespace_id=task.namespace_id,
            actor_id=ctx.identity.actor_id,
            action="task.review",
            reason=command.reason,
            evidence_ref=command.evidence_ref,
            request_id=ctx.request_id,
            before=before,
            after=after,
            now=ctx.now,
            task=task,
            operation_id=new_id(),
        )
        return Effect(
            before={"task": before},
            after={"task": after},
            step_key=plan.history.step.key,
            activation=plan.activation,
            task_id=task.id,
            execution_audit=execution_audit,
        )

    def publish(self, ctx: Context, plan: ReviewPlan) -> None:
        task = plan.task
        result_event_publish(
            locks=ctx.locks, task=task, kind=ResultKind.REVIEWED, outcome=task.outcome, result=task.result
        )


REVIEW_TASK = ReviewTask()

task_review = REVIEW_TASK.service
