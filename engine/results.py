"""The task result stream: every result event lands in the instance's inbox."""

from core import clock
from history.locking import LockSet
from history.models import (
    Attempt,
    Disposition,
    InboxRecord,
    InboxSource,
    InboxState,
    ResultEvent,
    ResultKind,
    Task,
)


def result_event_publish(
    *,
    locks: LockSet,
    task: Task,
    kind: ResultKind,
    outcome: str = "",
    result: str | None = None,
) -> ResultEvent:
    """Append an event to ``task``'s result stream and its inbox record, in the caller's transaction.

    The result-stream lock is the last lock of the transaction; the task row must already be
    locked and carry its new revision.
    """
    return _appended(task=task, seq=locks.lock_result_stream(task.id), kind=kind, outcome=outcome, result=result)


def _appended(
    *, task: Task, seq: int, kind: ResultKind, outcome: str, result: str | None, late_attempt: Attempt | None = None
) -> ResultEvent:
    """Event ``seq`` of ``task``'s locked stream and its inbox record. With ``late_attempt`` the event is
    late evidence of that attempt: its record is written already CONSUMED and LATE_RECORDED, so the
    consumer never applies it and nothing (not even a revision) changes because of it.
    """
    now = clock.now()
    event = ResultEvent.objects.create(
        task=task,
        seq=seq,
        kind=kind,
        outcome=outcome,
        result=result,
        task_revision=task.revision,
        created_at=now,
        late=late_attempt is not None,
        attempt=late_attempt,
    )
    record = InboxRecord(
        instance_id=task.source_instance_id,
        source_kind=InboxSource.RESULT_EVENT,
        source_id=event.id,
        task=task,
        activation_id=task.source_activation_id,
        created_at=now,
    )
    if late_attempt is not None:
        record.state, record.disposition, record.consumed_at = InboxState.CONSUMED, Disposition.LATE_RECORDED, now
    record.save(force_insert=True)
    return event


def late_result_record(*, locks: LockSet, task: Task, attempt: Attempt, outcome: str, result: str) -> ResultEvent:
    """Keep a completion of an attempt that lost its lease as late evidence; the first report of it wins.

    The task row must be locked: under that lock a second report of the same attempt finds the
    first event and writes nothing, so a worker resending its completion gets the same answer.
    On a cluster that lock is its node's own: the first report is looked for after the stream's
    position is read, so a report committed on another node is either seen here, or this one's
    (task, seq) is taken by it or by an event it saw: a unique key they collide on, at commit or
    at the insert.
    """
    seq = locks.lock_result_stream(task.id)
    first = ResultEvent.objects.filter(task_id=task.id, attempt_id=attempt.id, late=True).first()
    if first is not None:
        return first
    return _appended(task=task, seq=seq, kind=ResultKind.RESULT, outcome=outcome, result=result, late_attempt=attempt)
