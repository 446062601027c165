"""The task result stream: every result event lands in the instance's inbox."""

from history import clock
from history.locking import LockSet
from history.models import InboxRecord, InboxSource, ResultEvent, ResultKind, Task


def result_event_publish(
    *, locks: LockSet, task: Task, kind: ResultKind, outcome: str = "", result: str | None = None
) -> ResultEvent:
    """Append an event to ``task``'s result stream and its inbox record, in the caller's transaction.

    The result-stream lock is the last lock of the transaction; the task row must already be
    locked and carry its new revision.
    """
    seq = locks.lock_result_stream(task.id)
    now = clock.now()
    event = ResultEvent.objects.create(
        task=task, seq=seq, kind=kind, outcome=outcome, result=result, task_revision=task.revision, created_at=now
    )
    InboxRecord.objects.create(
        instance_id=task.source_instance_id,
        source_kind=InboxSource.RESULT_EVENT,
        source_id=event.id,
        task=task,
        activation_id=task.source_activation_id,
        created_at=now,
    )
    return event
