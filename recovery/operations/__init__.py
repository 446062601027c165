"""The six recovery operations, one module each; ``OPERATIONS`` maps the API name to each."""

from recovery.common import Operation
from recovery.operations.continue_instance import CONTINUE, instance_continue
from recovery.operations.continue_poll import CONTINUE_POLL, poll_continue
from recovery.operations.rearm_wait import REARM_WAIT, wait_rearm
from recovery.operations.resolve_step import RESOLVE_STEP, step_resolve
from recovery.operations.retry_step import RETRY_STEP, step_retry
from recovery.operations.review_task import REVIEW_TASK, task_review

OPERATIONS: dict[str, Operation] = {
    op.name: op for op in (REVIEW_TASK, RESOLVE_STEP, CONTINUE_POLL, REARM_WAIT, CONTINUE, RETRY_STEP)
}
SERVICES = {
    REVIEW_TASK.name: task_review,
    RESOLVE_STEP.name: step_resolve,
    CONTINUE_POLL.name: poll_continue,
    REARM_WAIT.name: wait_rearm,
    CONTINUE.name: instance_continue,
    RETRY_STEP.name: step_retry,
}

__all__ = [
    "OPERATIONS",
    "SERVICES",
    "instance_continue",
    "poll_continue",
    "step_resolve",
    "step_retry",
    "task_review",
    "wait_rearm",
]
