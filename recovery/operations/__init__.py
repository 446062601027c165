"""The recovery operations, one module each, and ``OPERATIONS``: the one list of them.

Every table of operations (API routes and their documentation, console forms and buttons,
eligibility entries) is built from this list, in this order.
"""

from recovery.operations.continue_instance import CONTINUE, instance_continue
from recovery.operations.continue_poll import CONTINUE_POLL, poll_continue
from recovery.operations.rearm_wait import REARM_WAIT, wait_rearm
from recovery.operations.resolve_step import RESOLVE_STEP, step_resolve
from recovery.operations.retry_step import RETRY_STEP, step_retry
from recovery.operations.review_task import REVIEW_TASK, task_review
from recovery.pipeline import Operation

OPERATIONS: dict[str, Operation] = {
    op.name: op for op in (REVIEW_TASK, RESOLVE_STEP, RETRY_STEP, CONTINUE_POLL, REARM_WAIT, CONTINUE)
}

__all__ = [
    "OPERATIONS",
    "instance_continue",
    "poll_continue",
    "step_resolve",
    "step_retry",
    "task_review",
    "wait_rearm",
]
