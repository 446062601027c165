"""The no-progress watchdog: instances stuck without being in review, each marked with a typed reason.

It never changes the engine's state — the seeds say when an instance enters review — only the marks
(``history.models.Stall``), beside the instances. Each reason is read from an index and bounded per pass: paused
instances by (namespace, paused, updated_at), waiting inbox records and continuations by (state, created_at), tasks
retried again and again by (state, attempt_count), the queued tasks of a queue nobody takes from by (queue, state,
…), signals overdue by the waits' (state, expected_at). A mark goes when the instance moves (its revision) or, once a
reason's candidates were read whole, when the reason no longer holds. Registered as the runner's last pass; it counts
the marks it changed, so a settled runner settles.

A lease that keeps expiring is no reason here: the first expiry puts its task and instance in review (the engine
never retries after UNKNOWN).
"""

import datetime as dt

from django.conf import settings
from django.db import transaction

from core import clock
from core.ids import new_id
from core.signatures import result_pattern
from core.times import format_time
from history.models import (
    Attempt,
    AttemptState,
    BackgroundProcess,
    Continuation,
    ContinuationState,
    InboxRecord,
    InboxState,
    InstanceState,
    Namespace,
    ProcessKind,
    Queue,
    Stall,
    StallReason,
    Task,
    TaskState,
    Wait,
    WaitState,
    WorkflowInstance,
)

# Candidates read per reason and pass: past it, the rest waits for the next pass.
BATCH = 500
STUCK_STATES = (InstanceState.RUNNING, InstanceState.CANCELLING)


def pass_watchdog() -> int:
    """Mark the stalled instances, clear the marks of those that moved or no longer stall; the marks changed."""
    now = clock.now()
    found: dict[str, tuple[str, str, dt.datetime]] = {}
    whole: set[str] = set()
    for reason, (candidates, read_whole) in (
        (StallReason.PAUSED_TOO_LONG, _paused(now)),
        (StallReason.INBOX_WAITING, _waiting(InboxRecord, InboxState.PENDING, "an inbox record", now)),
        (StallReason.CONTINUATION_WAITING, _waiting(Continuation, ContinuationState.PENDING, "a continuation", now)),
        (StallReason.RETRYING_SAME_FAILURE, _retrying()),
        (StallReason.UNCLAIMED, _unclaimed(now)),
        (StallReason.SIGNAL_OVERDUE, _overdue(now)),
    ):
        if read_whole:
            whole.add(reason)
        for instance_id, (detail, since) in candidates.items():
            found.setdefault(instance_id, (reason, detail, since))
    with transaction.atomic():
        return _marks_sync(found, whole, now)


# What a reason's reader returns: the instances found, each with its detail and since when, and whether it read
# every candidate (fewer than BATCH): only then may a mark of that reason whose instance it did not find go.
Found = tuple[dict[str, tuple[str, dt.datetime]], bool]


def paused_rows(namespace_id: str, bound: dt.datetime, limit: int):
    """A namespace's instances paused since before ``bound``, the longest first: a range of its paused index."""
    rows = WorkflowInstance.objects.filter(
        namespace_id=namespace_id, paused=True, updated_at__lt=bound, state__in=STUCK_STATES
    )
    return rows.order_by("updated_at", "id").values_list("id", "updated_at")[:limit]


def _paused(now: dt.datetime) -> Found:
    bound = now - dt.timedelta(seconds=settings.WEAVE_STALL_PAUSED_SECONDS)
    found = {}
    for namespace_id in Namespace.objects.values_list("id", flat=True):
        for instance_id, since in paused_rows(namespace_id, bound, BATCH - len(found)):
            found[instance_id] = (f"paused since {format_time(since)}", since)
    return found, len(found) < BATCH


def waiting_rows(model, pending: str, bound: dt.datetime, limit: int):
    """The oldest ``model`` rows pending since before ``bound``: the start of its (state, created_at) index, never
    the whole backlog (a runner down for a day leaves a long one)."""
    rows = model.objects.filter(state=pending, created_at__lt=bound).order_by("created_at", "id")
    return rows.values_list("instance_id", "created_at")[:limit]


def _waiting(model, pending: str, what: str, now: dt.datetime) -> Found:
    """The instances (not in review) with a ``model`` row pending since before the bound, by its oldest."""
    bound = now - dt.timedelta(seconds=settings.WEAVE_STALL_WAITING_SECONDS)
    rows = list(waiting_rows(model, pending, bound, BATCH))
    found: dict[str, tuple[str, dt.datetime]] = {}
    for instance_id, since in rows:  # oldest first: an instance's first row is its oldest
        found.setdefault(instance_id, (f"{what} has waited for the runner since {format_time(since)}", since))
    return _outside_review(found), len(rows) < BATCH


def retrying_rows(retries: int, limit: int):
    """Queued tasks with at least ``retries`` attempts, the most attempted first: a range of (state, attempt_count),
    read in its order (the primary key rides along in the index, so id breaks ties without a sort)."""
    rows = Task.objects.filter(state=TaskState.QUEUED, attempt_count__gte=retries).order_by("-attempt_count", "-id")
    return rows.values_list("id", "source_instance_id")[:limit]


def _retrying() -> Found:
    """The instances (not in review) with a task queued again after its last WEAVE_STALL_RETRIES attempts failed
    with one failure pattern (``core.signatures``): retrying will not help. Read from the queued tasks with that
    many attempts (an index range), then their attempts."""
    retries = settings.WEAVE_STALL_RETRIES
    tasks = dict(retrying_rows(retries, BATCH))
    attempts: dict[str, list] = {}
    rows = Attempt.objects.filter(task_id__in=list(tasks)).order_by("task_id", "-number")
    for task_id, state, result, finished in rows.values_list("task_id", "state", "result", "finished_at"):
        attempts.setdefault(task_id, []).append((state, result, finished))
    found = {}
    for task_id, last in attempts.items():
        last = last[:retries]
        patterns = {result_pattern(result or "") for _, result, _ in last}
        if len(last) == retries and {state for state, _, _ in last} == {AttemptState.FAILED} and len(patterns) == 1:
            since = last[-1][2]
            found[tasks[task_id]] = (f"task {task_id} failed {retries} attempts in a row with {patterns.pop()}", since)
    return _outside_review(found), len(tasks) < BATCH


def queued_rows(queue_id: str, limit: int):
    """A queue's queued tasks, at most ``limit``, in the order a claim takes them: a range of its claim-order index."""
    rows = Task.objects.filter(queue_id=queue_id, state=TaskState.QUEUED).order_by("-priority", "created_at", "id")
    return rows.values_list("id", "source_instance_id", "updated_at", "deadline_at", "latest_start_at")[:limit]


def _unclaimed(now: dt.datetime) -> Found:
    """The instances (running, not paused) with a claimable task queued since before the bound on a queue nobody
    takes from: no live ``weave_worker`` serves it and no task of it is leased (a worker of the task API has no
    process row, but holds a lease while it works)."""
    bound = now - dt.timedelta(seconds=settings.WEAVE_STALL_WAITING_SECONDS)
    live = BackgroundProcess.objects.filter(
        kind=ProcessKind.WORKER,
        stopped_at=None,
        beat_at__gte=now - dt.timedelta(seconds=settings.WEAVE_HEARTBEAT_STALE_SECONDS),
    )
    served = set(live.values_list("namespace_id", "queue"))
    found: dict[str, tuple[str, dt.datetime]] = {}
    whole = True
    for queue_id, namespace_id, name in Queue.objects.order_by("id").values_list("id", "namespace_id", "name"):
        if len(found) >= BATCH:
            return _outside_review(found, claimable=True), False
        if (namespace_id, name) in served or Task.objects.filter(queue_id=queue_id, state=TaskState.LEASED).exists():
            continue
        limit = BATCH - len(found)
        rows = list(queued_rows(queue_id, limit))
        whole = whole and len(rows) < limit
        for task_id, instance_id, since, deadline_at, latest_start_at in rows:
            if since < bound and all(moment is None or moment > now for moment in (deadline_at, latest_start_at)):
                detail = f"task {task_id} queued on {name} since {format_time(since)}; no worker takes from {name}"
                found.setdefault(instance_id, (detail, since))
    return _outside_review(found, claimable=True), whole


def overdue_rows(bound: dt.datetime, limit: int):
    """Waits still waiting for a signal expected before ``bound``, the longest overdue first: a range of the waits'
    (state, expected_at) index."""
    rows = Wait.objects.filter(state=WaitState.WAITING, expected_at__lt=bound).order_by("expected_at", "id")
    return rows.values_list("instance_id", "signal_name", "expected_at", "deadline_at")[:limit]


def _overdue(now: dt.datetime) -> Found:
    """The instances (not in review) waiting for a signal past the time their definition expects it
    (``expected_seconds``): the engine waits on until the deadline, but the sender is late."""
    rows = list(overdue_rows(now, BATCH))
    found: dict[str, tuple[str, dt.datetime]] = {}
    for instance_id, name, expected_at, deadline_at in rows:
        detail = (
            f"signal {name} expected by {format_time(expected_at)}, not in; its deadline is {format_time(deadline_at)}"
        )
        found.setdefault(instance_id, (detail, expected_at))
    return _outside_review(found), len(rows) < BATCH


def _outside_review(found: dict[str, tuple[str, dt.datetime]], *, claimable: bool = False) -> dict:
    """``found`` without the instances in review or ended: only those the engine still means to move; with
    ``claimable``, only those running with their gate open (a task of one paused or stopping is not claimed)."""
    rows = WorkflowInstance.objects.filter(pk__in=list(found))
    rows = rows.filter(state=InstanceState.RUNNING, paused=False) if claimable else rows.filter(state__in=STUCK_STATES)
    return {instance_id: found[instance_id] for instance_id in rows.values_list("id", flat=True)}


def _marks_sync(found: dict, whole: set[str], now: dt.datetime) -> int:
    marks = {stall.instance_id: stall for stall in Stall.objects.select_for_update()}
    # Every marked or found instance as it is now: a mark whose instance moved goes, whatever its reason.
    current = {
        instance_id: (revision, namespace_id)
        for instance_id, revision, namespace_id in WorkflowInstance.objects.filter(pk__in=[*found, *marks]).values_list(
            "id", "revision", "namespace_id"
        )
    }
    gone = {
        stall.pk
        for instance_id, stall in marks.items()
        if (instance_id not in found and stall.reason in whole)
        or instance_id not in current
        or current[instance_id][0] != stall.revision
    }
    changed = Stall.objects.filter(pk__in=gone).delete()[0] if gone else 0
    kept = {instance_id for instance_id, stall in marks.items() if stall.pk not in gone}
    new = [
        Stall(
            id=new_id(),
            namespace_id=current[instance_id][1],
            instance_id=instance_id,
            reason=reason,
            detail=detail[:512],
            since=since,
            revision=current[instance_id][0],
            marked_at=now,
        )
        for instance_id, (reason, detail, since) in found.items()
        if instance_id not in kept and instance_id in current
    ]
    # Two runners may mark the same instance in the same moment: the second mark is the first's.
    Stall.objects.bulk_create(new, ignore_conflicts=True)
    return changed + len(new)
