"""Quota permits: a task holds one application slot and one queue slot until it is terminal.

The counters (``active_tasks``) always equal the number of permits held (``Task.permit_held``);
``weave_check`` verifies it. Taking or releasing a permit needs the application and the queue
rows locked first (they come before the instance in the lock order), so every transaction that
may create or finish a task starts with ``quota_lock``.
"""

from dataclasses import dataclass

from core.errors import Unavailable
from history.locking import Level, LockSet
from history.models import Application, Queue, Task, WorkflowDefinition


@dataclass
class Quota:
    """The locked quota rows of one transaction: the application and queues by name."""

    application: Application
    queues: dict[str, Queue]


def quota_lock(*, locks: LockSet, definition: WorkflowDefinition) -> Quota:
    """Lock the definition's application, then its queues sorted by name (the start of the lock order)."""
    application_id = (
        Application.objects.filter(namespace_id=definition.namespace_id, name=definition.spec["application"])
        .values_list("id", flat=True)
        .first()
    )
    application = locks.lock_one(Level.APPLICATION, application_id) if application_id else None
    queues = locks.lock_queues(definition.namespace_id, definition.queues)
    if application is None or len(queues) != len(definition.queues):
        raise Unavailable(f"definition {definition.id} references a missing application or queue")
    return Quota(application=application, queues=queues)


def quota_lock_for_task(*, locks: LockSet, task: Task, queue_name: str | None = None) -> Quota:
    """Lock the application and queue a task is charged to (its permit's slots).

    ``queue_name``, when the caller already read it, saves reading it here; a stale one cannot
    pass, since releasing a permit checks the locked queue is the task's own.
    """
    application = locks.lock_one(Level.APPLICATION, task.application_id)
    if queue_name is None:
        queue_name = Queue.objects.filter(pk=task.queue_id).values_list("name", flat=True).first()
    queues = locks.lock_queues(task.namespace_id, [queue_name]) if queue_name else {}
    if application is None or not queues:
        raise Unavailable(f"task {task.id} references a missing application or queue")
    return Quota(application=application, queues=queues)


def permit_available(*, application: Application, queue: Queue) -> bool:
    return application.active_tasks < application.max_active_tasks and queue.active_tasks < queue.max_active_tasks


def permit_take(*, locks: LockSet, application: Application, queue: Queue) -> bool:
    """Take one slot of the application and one of the queue; False (nothing changed) when either is full.

    Both rows must be locked in this transaction (``quota_lock``); the caller creates the task
    with ``permit_held=True`` only after a True answer — never a task without a permit.
    """
    if locks.level < Level.QUEUE:
        raise AssertionError("permit_take needs the application and queue locked first")
    if not permit_available(application=application, queue=queue):
        return False
    application.active_tasks += 1
    queue.active_tasks += 1
    application.save(update_fields=["active_tasks"])
    queue.save(update_fields=["active_tasks"])
    return True


def permit_release(*, locks: LockSet, application: Application, queue: Queue, task: Task) -> None:
    """Give back the task's two slots and clear ``task.permit_held`` (the caller saves the task).

    Refuses (UNAVAILABLE: corruption) a task charged to other rows or a counter already at zero.
    """
    if locks.level < Level.QUEUE:
        raise AssertionError("permit_release needs the application and queue locked first")
    if not task.permit_held:
        return
    if task.application_id != application.id or task.queue_id != queue.id:
        raise Unavailable(f"task {task.id} is not charged to application {application.id} / queue {queue.id}")
    if application.active_tasks == 0 or queue.active_tasks == 0:
        raise Unavailable(f"quota counters of task {task.id} are already zero: drift")
    application.active_tasks -= 1
    queue.active_tasks -= 1
    application.save(update_fields=["active_tasks"])
    queue.save(update_fields=["active_tasks"])
    task.permit_held = False
