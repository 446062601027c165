"""Quota permits: a task holds one application slot and one queue slot until it is terminal.

The counters (``active_tasks``) always equal the number of permits held (``Task.permit_held``);
``weave_check`` verifies it. The application and queue rows come last in the lock order (only
the result stream after them), and a ``Quota`` locks them at its first take or release: a
transaction holds a namespace's counters only from that point to its commit, so the writers of
a namespace do not queue behind one another for their whole transaction.
"""

from django.db.models import F

from core.errors import Unavailable
from history.locking import Level, LockSet
from history.models import Application, Queue, Task, WorkflowDefinition


class Quota:
    """The application and queues one transaction may charge permits to, locked at first use."""

    def __init__(
        self,
        *,
        locks: LockSet,
        namespace_id: str,
        queue_names: list[str],
        owner: str,
        application_id: str | None = None,
        application_name: str | None = None,
    ):
        self._locks = locks
        self._namespace_id = namespace_id
        self._application_id = application_id
        self._application_name = application_name
        self._queue_names = sorted(set(queue_names))
        self._owner = owner
        self._rows: tuple[Application, dict[str, Queue]] | None = None

    def _locked(self) -> tuple[Application, dict[str, Queue]]:
        if self._rows is None:
            if self._application_id:
                application = self._locks.lock_one(Level.APPLICATION, self._application_id)
            else:
                application = self._locks.lock_application(self._namespace_id, self._application_name)
            queues = self._locks.lock_queues(self._namespace_id, self._queue_names)
            if application is None or not queues or len(queues) != len(self._queue_names):
                raise Unavailable(f"{self._owner} references a missing application or queue")
            self._rows = application, queues
        return self._rows

    @classmethod
    def locked(cls, *, locks: LockSet, application: Application, queues: dict[str, Queue]) -> "Quota":
        """A quota over rows this transaction has already locked."""
        quota = cls(locks=locks, namespace_id=application.namespace_id, queue_names=list(queues), owner="")
        quota._rows = application, queues
        return quota

    @property
    def application(self) -> Application:
        return self._locked()[0]

    def queue(self, name: str) -> Queue:
        return self._locked()[1][name]

    def queue_of(self, task: Task) -> Queue:
        """The locked queue a task is charged to (UNAVAILABLE when it is none of this quota's)."""
        queue = next((q for q in self._locked()[1].values() if q.id == task.queue_id), None)
        if queue is None:
            raise Unavailable(f"task {task.id} is not charged to a queue of {self._owner}")
        return queue

    def take(self, queue_name: str) -> bool:
        """Take a permit of the application and the named queue (``permit_take``)."""
        return permit_take(locks=self._locks, application=self.application, queue=self.queue(queue_name))

    def release(self, task: Task) -> None:
        """Give back the task's permit, if it holds one (``permit_release``); nothing is locked otherwise.

        A task's own quota, not yet locked, gives it back with one conditional decrement per row,
        which takes the row locks in the same statements (no locking read before them).
        """
        if not task.permit_held:
            return
        if self._rows is not None or not self._application_id or len(self._queue_names) != 1:
            permit_release(locks=self._locks, application=self.application, queue=self.queue_of(task), task=task)
            return
        if task.application_id != self._application_id:
            raise Unavailable(f"task {task.id} is not charged to application {self._application_id}")
        self._locks.lock_by_write(Level.APPLICATION, self._application_id)
        applications = Application.objects.filter(pk=self._application_id, active_tasks__gt=0)
        counted = applications.update(active_tasks=F("active_tasks") - 1)
        self._locks.lock_by_write(Level.QUEUE, self._queue_names[0])
        queues = Queue.objects.filter(pk=task.queue_id, namespace_id=self._namespace_id, name=self._queue_names[0])
        counted += queues.filter(active_tasks__gt=0).update(active_tasks=F("active_tasks") - 1)
        if counted != 2:
            raise Unavailable(f"task {task.id}: its application or queue is missing, not its own, or already at zero")
        task.permit_held = False


def quota_of(*, locks: LockSet, definition: WorkflowDefinition) -> Quota:
    """The quota of a definition's tasks: its application and its queues (nothing is read until used)."""
    return Quota(
        locks=locks,
        namespace_id=definition.namespace_id,
        application_name=definition.spec["application"],
        queue_names=definition.queues,
        owner=f"definition {definition.id}",
    )


def quota_of_task(*, locks: LockSet, task: Task, queue_name: str | None = None) -> Quota:
    """The application and queue a task is charged to (its permit's slots); nothing is locked until used.

    ``queue_name``, when the caller already read it, saves reading it here; a stale one cannot
    pass, since releasing a permit checks the locked queue is the task's own.
    """
    if queue_name is None:
        queue_name = Queue.objects.filter(pk=task.queue_id).values_list("name", flat=True).first()
    return Quota(
        locks=locks,
        namespace_id=task.namespace_id,
        application_id=task.application_id,
        queue_names=[queue_name] if queue_name else [],
        owner=f"task {task.id}",
    )


def permit_available(*, application: Application, queue: Queue) -> bool:
    return application.active_tasks < application.max_active_tasks and queue.active_tasks < queue.max_active_tasks


def permit_take(*, locks: LockSet, application: Application, queue: Queue) -> bool:
    """Take one slot of the application and one of the queue; False (nothing changed) when either is full.

    Both rows must be locked in this transaction (a ``Quota`` locks them); the caller creates the task
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
