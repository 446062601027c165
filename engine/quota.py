"""Quota permits: a task holds one application slot and one queue slot until it is terminal.

The counters (``active_tasks``) always equal the number of permits held (``Task.permit_held``);
``weave_check`` verifies it. The application and queue rows come last in the lock order (only
the result stream after them), and a ``Quota`` locks them at its first take or release (for one
queue, by the increments or decrements themselves): a
transaction holds a namespace's counters only from that point to its commit, so the writers of
a namespace do not queue behind one another for their whole transaction.
"""

from django.db.models import F

from core.errors import Unavailable
from core.read_once import ReadOnce
from history.locking import Level, LockSet
from history.models import Application, Queue, Task, WorkflowDefinition

# An application's and a queue's namespace and name never change once created (both are only ever added,
# ``history.tenancy``): the inbox checks the queue of every result it applies, and a take finds its rows by
# name, so each process keeps those it read.
queue_named: ReadOnce[str, tuple[str, str]] = ReadOnce(
    lambda pk: Queue.objects.filter(pk=pk).values_list("namespace_id", "name").first()
)
queue_id_named: ReadOnce[tuple[str, str], str] = ReadOnce(
    lambda key: Queue.objects.filter(namespace_id=key[0], name=key[1]).values_list("id", flat=True).first()
)
_application_id: ReadOnce[tuple[str, str], str] = ReadOnce(
    lambda key: Application.objects.filter(namespace_id=key[0], name=key[1]).values_list("id", flat=True).first()
)


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
        # The application and queue ids a first take charged by its own writes (``take``), rows it holds unread.
        self._charged: tuple[str, str] | None = None

    def _locked(self) -> tuple[Application, dict[str, Queue]]:
        if self._rows is None and self._charged is not None:
            # Locked by the take's writes already: read, not locked again (the lock order is past them).
            application_id, queue_id = self._charged
            self._rows = (
                Application.objects.get(pk=application_id),
                {self._queue_names[0]: Queue.objects.get(pk=queue_id)},
            )
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

    @property
    def application_id(self) -> str:
        return self._charged[0] if self._charged else self.application.id

    def queue_id(self, name: str) -> str:
        return self._charged[1] if self._charged else self.queue(name).id

    def take(self, queue_name: str) -> bool:
        """Take a permit of the application and the named queue (``permit_take``).

        The first take of a quota over one queue, nothing locked yet, is one conditional increment per row
        (``_take_by_writes``); otherwise, or when either row is full or unknown, the rows are locked and judged.
        """
        if self._rows is None and not self._charged and self._queue_names == [queue_name]:
            taken = self._take_by_writes(queue_name)
            if taken is not None:
                return taken
        return permit_take(locks=self._locks, application=self.application, queue=self.queue(queue_name))

    def _take_by_writes(self, queue_name: str) -> bool | None:
        """True with a permit taken by one conditional increment of each row, which takes the row's lock in its
        place in the lock order (no locking read before it); None, nothing changed, when a row is full or unknown.
        """
        application_id = self._application_id or _application_id((self._namespace_id, self._application_name))
        queue_id = queue_id_named((self._namespace_id, queue_name))
        if application_id is None or queue_id is None:
            return None
        self._locks.lock_by_write(Level.APPLICATION, application_id)
        if not _counted(Application.objects.filter(pk=application_id), +1):
            return None
        self._locks.lock_by_write(Level.QUEUE, queue_name)
        if not _counted(Queue.objects.filter(pk=queue_id, namespace_id=self._namespace_id), +1):
            _counted(Application.objects.filter(pk=application_id), -1)
            # The application is held by the writes above; the queue is locked in its place in the order.
            self._rows = (
                Application.objects.get(pk=application_id),
                self._locks.lock_queues(self._namespace_id, [queue_name]),
            )
            return None
        self._charged = application_id, queue_id
        return True

    def release(self, task: Task) -> None:
        """Give back the task's permit, if it holds one (``permit_release``); nothing is locked otherwise.

        A task's own quota, not yet locked, gives it back with one conditional decrement per row,
        which takes the row locks in the same statements (no locking read before them).
        """
        if not task.permit_held:
            return
        if self._rows is not None or self._charged or not self._application_id or len(self._queue_names) != 1:
            permit_release(locks=self._locks, application=self.application, queue=self.queue_of(task), task=task)
            return
        if task.application_id != self._application_id:
            raise Unavailable(f"task {task.id} is not charged to application {self._application_id}")
        self._locks.lock_by_write(Level.APPLICATION, self._application_id)
        counted = _counted(Application.objects.filter(pk=self._application_id), -1)
        self._locks.lock_by_write(Level.QUEUE, self._queue_names[0])
        queues = Queue.objects.filter(pk=task.queue_id, namespace_id=self._namespace_id, name=self._queue_names[0])
        counted += _counted(queues, -1)
        if counted != 2:
            raise Unavailable(f"task {task.id}: its application or queue is missing, not its own, or already at zero")
        task.permit_held = False


def _counted(rows, change: int) -> bool:
    """Add ``change`` to the active tasks of ``rows`` (one row) if it stays within 0 and its maximum."""
    rows = rows.filter(active_tasks__lt=F("max_active_tasks")) if change > 0 else rows.filter(active_tasks__gt=0)
    return rows.update(active_tasks=F("active_tasks") + change) == 1


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
        named = queue_named(task.queue_id)
        queue_name = named[1] if named else None
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
