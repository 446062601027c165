"""The worker protocol: claim a task through an open gate, heartbeat its lease, complete it.

The lease is enforced by the runner's lease-expiry pass: until that pass turns a RUNNING
attempt UNKNOWN, its worker still owns it (a heartbeat extends it, a completion is accepted);
afterwards both are answered ``late``: the completion is kept as late evidence and changes
nothing. The attempt row under the task lock decides, so a completion racing the expiry yields
exactly one outcome: a normal completion or late evidence, never both.
"""

import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError
from django.db.models import Exists, OuterRef, Q, QuerySet

from core import clock, fields
from core.errors import FailedPrecondition, NotFound
from core.identity import Identity
from core.metrics import WORKER_CLAIMS, WORKER_COMPLETIONS
from engine.budget import attempts_left
from engine.commands import command_object, id_argument
from engine.quota import Quota, permit_release, queue_id_named, quota_of_task
from engine.results import late_result_record, result_event_publish
from engine.state import touch
from history.events import WORKER, acting
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Application,
    Attempt,
    AttemptState,
    Gate,
    Queue,
    ResultKind,
    Scope,
    Task,
    TaskState,
    WorkflowInstance,
)
from history.prepared import Prepared
from history.selectors.access import task_workable, tasks_with_queue_name
from history.tenancy import is_name

DEFAULT_LEASE_SECONDS = 30
MAX_LEASE_SECONDS = 3600
CLAIM_CANDIDATES = 10


@dataclass(frozen=True)
class Claim:
    task: Task
    attempt: Attempt


def _lease_seconds(command: dict) -> int:
    if "lease_seconds" not in command:
        return DEFAULT_LEASE_SECONDS
    return fields.integer("lease_seconds", command["lease_seconds"], low=1, high=MAX_LEASE_SECONDS)


def _worker_name(command: dict) -> str:
    return fields.text("worker", fields.required(command, "worker"), max_length=128)


def _claimable(now: dt.datetime) -> Q:
    return (
        Q(state=TaskState.QUEUED)
        & (Q(deadline_at__isnull=True) | Q(deadline_at__gt=now))
        & (Q(latest_start_at__isnull=True) | Q(latest_start_at__gt=now))
    )


def _is_claimable(task: Task, now: dt.datetime) -> bool:
    """``_claimable`` of a row already read (and locked)."""
    return (
        task.state == TaskState.QUEUED
        and (task.deadline_at is None or task.deadline_at > now)
        and (task.latest_start_at is None or task.latest_start_at > now)
    )


def claim_candidates(namespace_id: str, queue_name: str, now: dt.datetime) -> QuerySet:
    """(task id, instance id, queue id) of the queue's claimable tasks behind open gates, in the order they are
    claimed: highest priority first, then oldest; read from the head of the queue's claim-order index."""
    return (
        Task.objects.filter(_claimable(now), queue__namespace_id=namespace_id, queue__name=queue_name)
        .filter(Exists(Gate.objects.filter(instance_id=OuterRef("source_instance_id"), open=True)))
        .order_by("-priority", "created_at", "id")
        .values_list("id", "source_instance_id", "queue_id")
    )


@functools.cache
def _candidates(count: int) -> Prepared:
    """The first ``count`` claim candidates, compiled once: a worker's most frequent read, idle polls included."""
    return Prepared(lambda namespace_id, queue_name, now: claim_candidates(namespace_id, queue_name, now)[:count])


def task_claim(*, identity: Identity, queue_name: str, command: Any) -> Claim | None:
    """Lease the highest-priority QUEUED task of the queue whose gate is open and whose deadlines are ahead.

    Command ``{worker, lease_seconds?}``. Creates attempt number attempt_count + 1 RUNNING with a
    lease; the task becomes LEASED. None when nothing is claimable. Candidates are read without
    locks, then each is re-checked under instance → gate → task locks; an instance another
    transaction holds is first skipped (SKIP LOCKED) and only waited for if nothing else was claimable.
    """
    claims = task_claim_batch(identity=identity, queue_name=queue_name, command=command, limit=1)
    return claims[0] if claims else None


def task_claim_batch(*, identity: Identity, queue_name: str, command: Any, limit: int) -> list[Claim]:
    """``task_claim`` of up to ``limit`` tasks, ``limit`` candidates per transaction, highest priority first.

    Each transaction locks its candidates' instances (SKIP LOCKED), then their gates, then the
    tasks, each level in key order. Candidates whose instance was busy are waited for one at a
    time only when nothing else was claimable.
    """
    identity.require_scope(Scope.TASKS_WORK)
    command = command_object(command, allowed=("worker", "lease_seconds"))
    worker = _worker_name(command)
    lease = _lease_seconds(command)
    if not is_name(queue_name) or not identity.can_access_queues([queue_name]):
        raise NotFound(f"queue {queue_name} not found", field="queue")
    # The queue is found by its (unique) name in the candidates' query; looked for on its own only when
    # there is no candidate, to tell an empty queue from a missing one (a queue found is kept: never removed).
    rows = _candidates(max(CLAIM_CANDIDATES, 2 * limit))(identity.namespace_id, queue_name, clock.now())
    if not rows:
        if queue_id_named((identity.namespace_id, queue_name)) is None:
            raise NotFound(f"queue {queue_name} not found", field="queue")
        WORKER_CLAIMS.labels(queue_name, "empty").inc()
        return []
    candidates = [(task_id, instance_id) for task_id, instance_id, _ in rows]
    claim = functools.partial(_claim_many, queue_id=rows[0][2], queue_name=queue_name, worker=worker, lease=lease)
    claims: list[Claim] = []
    busy: list[tuple[str, str]] = []
    with acting(WORKER, worker):
        while candidates and len(claims) < limit:
            chunk, candidates = candidates[: limit - len(claims)], candidates[limit - len(claims) :]
            got, skipped = atomic_with_retry(lambda c=chunk: claim(c, skip_locked=True))
            claims += got
            busy += skipped
        # Every candidate whose instance was busy is tried once more, waiting for its lock this
        # time, so "nothing claimable" never just means "another worker was holding it".
        for candidate in busy if not claims else ():
            claims, _ = atomic_with_retry(lambda c=candidate: claim([c], skip_locked=False))
            if claims:
                break
    WORKER_CLAIMS.labels(queue_name, "tasks" if claims else "empty").inc()
    return claims


def _claim_many(
    candidates: list[tuple[str, str]], *, queue_id: str, queue_name: str, worker: str, lease: int, skip_locked: bool
) -> tuple[list[Claim], list[tuple[str, str]]]:
    """(claims, candidates whose instance another transaction held) for (task id, instance id) candidates."""
    locks = LockSet()
    instances = locks.lock(Level.INSTANCE, [i for _, i in candidates], skip_locked=skip_locked)
    held = [(t, i) for t, i in candidates if i in instances]
    gates = locks.lock(Level.GATE, [i for _, i in held])
    tasks = locks.lock(Level.TASK, [t for t, _ in held])
    now = clock.now()
    claims = []
    for task_id, instance_id in held:
        gate, task = gates.get(instance_id), tasks.get(task_id)
        if gate is None or not gate.open or task is None or task.queue_id != queue_id or not _is_claimable(task, now):
            continue  # taken meanwhile or held back: nothing is written under this instance, so nothing to certify
        task.attempt_count += 1
        attempt = Attempt.objects.create(
            task=task,
            number=task.attempt_count,
            worker=worker,
            lease_expires_at=now + dt.timedelta(seconds=lease),
            started_at=now,
        )
        task.state = TaskState.LEASED
        touch(task, now)
        task.queue_name = queue_name  # as ``tasks_with_queue_name`` reads it: the claim found it by that name
        claims.append(Claim(task=task, attempt=attempt))
    # A claim's instance is written: it guards the open gate and the QUEUED task the claim decided on.
    for instance_id in dict.fromkeys(claim.task.source_instance_id for claim in claims):
        touch(instances[instance_id], now)
    return claims, [(t, i) for t, i in candidates if i not in instances]


def _owned_task(identity: Identity, task_id: str, claimed: Task | None = None) -> Task:
    """The task ``identity`` may work, with ``queue_name``; ``claimed`` is the one its claim read (where a task
    belongs never changes, so it is not read again)."""
    if claimed is not None and claimed.id == task_id:
        task = claimed
    else:
        task = (
            tasks_with_queue_name()
            .filter(pk=id_argument(task_id, "task_id"), namespace_id=identity.namespace_id)
            .first()
        )
    if not task_workable(identity=identity, task=task):
        raise NotFound(f"task {task_id} not found", field="task_id")
    return task


@dataclass(frozen=True)
class Heartbeat:
    attempt: Attempt
    late: bool  # the lease was lost: the work is no longer wanted


@dataclass(frozen=True)
class Completion:
    task: Task
    late: bool  # the report came after the lease was lost: kept as evidence only


def _reported_attempt(task: Task, attempt_id: str) -> Attempt:
    """The attempt a worker reports on: RUNNING, or UNKNOWN (its lease was lost: the report is late).

    An attempt that already finished (SUCCEEDED or FAILED) was reported once: another report is
    refused, it is not late evidence.
    """
    attempt = Attempt.objects.filter(pk=attempt_id, task_id=task.id).first()
    if attempt is None:
        raise NotFound(f"attempt {attempt_id} of task {task.id} not found", field="attempt_id")
    if attempt.state not in (AttemptState.RUNNING, AttemptState.UNKNOWN):
        raise FailedPrecondition(
            f"attempt {attempt_id} already finished {attempt.state}: it is reported once", field="attempt_id"
        )
    return attempt


def task_heartbeat(*, identity: Identity, task_id: str, command: Any) -> Heartbeat:
    """Extend the lease of a RUNNING attempt to now + lease_seconds (never shortens it).

    Command ``{attempt_id, lease_seconds?}``. An attempt whose lease the runner already expired
    (UNKNOWN) is answered ``late`` so its worker stops, and nothing is written: a heartbeat says
    only that the work is still running, which the UNKNOWN attempt already allows for, and an
    operator needs the completion, not each beat. A finished attempt is refused.
    """
    identity.require_scope(Scope.TASKS_WORK)
    command = command_object(command, allowed=("attempt_id", "lease_seconds"))
    attempt_id = id_argument(command.get("attempt_id"), "attempt_id")
    lease = _lease_seconds(command)
    task = _owned_task(identity, task_id)

    def beat() -> Heartbeat:
        locks = LockSet()
        locks.lock_one(Level.TASK, task.id)
        attempt = _reported_attempt(task, attempt_id)
        if attempt.state == AttemptState.UNKNOWN:
            return Heartbeat(attempt=attempt, late=True)
        # The task stays unwritten: its lock only orders the decisions on this attempt, and each of them (this
        # beat, the completion, the lease expiry) writes the attempt row, where two nodes' decisions conflict.
        with acting(WORKER, attempt.worker):
            attempt.lease_expires_at = max(attempt.lease_expires_at, clock.now() + dt.timedelta(seconds=lease))
            attempt.save(update_fields=["lease_expires_at"])
        return Heartbeat(attempt=attempt, late=False)

    return atomic_with_retry(beat)


def _completion(command: dict) -> tuple[str, str, bool]:
    outcome = fields.choice("outcome", command.get("outcome"), ("SUCCEEDED", "FAILED"))
    result = fields.json_text("result", fields.required(command, "result", what="any JSON; not null for FAILED"))
    if outcome == "FAILED" and result == "null":
        raise fields.refuse("result", "the failure details with outcome FAILED, never null")
    retryable = fields.boolean("retryable", command.get("retryable", False))
    if retryable and outcome != "FAILED":
        raise fields.refuse("retryable", "false unless outcome is FAILED")
    return outcome, result, retryable


def task_complete(*, identity: Identity, task_id: str, command: Any, claimed: Task | None = None) -> Completion:
    """Finish a RUNNING attempt with SUCCEEDED or FAILED (retryable?).

    Command ``{attempt_id, outcome, result, retryable?}``. A retryable failure with attempts and
    time left requeues the task (no result event: the attempt row keeps the failure). Otherwise
    the task is terminal: its permit is released and a RESULT event (with its inbox record) is
    written last.

    An attempt whose lease was lost (UNKNOWN; its task in review, or by now reviewed and its
    activation superseded by a retry) is answered ``late``: its report is kept as a late RESULT
    event naming the attempt, with an inbox record already LATE_RECORDED, and no task, attempt,
    activation, step, instance, permit or revision changes. Reporting it again is answered the
    same and writes nothing. A finished attempt is refused.

    ``claimed``: the task as the worker's own claim returned it (``Claim.task``), saving its read.
    """
    identity.require_scope(Scope.TASKS_WORK)
    command = command_object(command, allowed=("attempt_id", "outcome", "result", "retryable"))
    attempt_id = id_argument(command.get("attempt_id"), "attempt_id")
    outcome, result, retryable = _completion(command)
    task = _owned_task(identity, task_id, claimed)

    def complete() -> Completion:
        locks = LockSet()
        instance = locks.lock_one(Level.INSTANCE, task.source_instance_id)
        locked = locks.lock_one(Level.TASK, task.id)
        attempt = _reported_attempt(locked, attempt_id)
        # The report is the attempt's worker's, late or not.
        with acting(WORKER, attempt.worker):
            return _attempt_report(
                locks=locks,
                quota=quota_of_task(locks=locks, task=task, queue_name=task.queue_name),  # by ``_owned_task``
                instance=instance,
                task=locked,
                attempt=attempt,
                outcome=outcome,
                result=result,
                retryable=retryable,
            )

    try:
        completion = atomic_with_retry(complete)
    except IntegrityError:
        # Late evidence writes no task row: on a cluster, an event another node appended to the stream after this
        # report read its position (the same report sent there too) can reach this node before the insert, which
        # then fails as a duplicate (task, seq) instead of a conflict. Taken again, the report sees that event.
        if not Attempt.objects.filter(pk=attempt_id, state=AttemptState.UNKNOWN).exists():
            raise
        completion = atomic_with_retry(complete)
    WORKER_COMPLETIONS.labels("late" if completion.late else outcome).inc()
    return completion


def _attempt_report(
    *,
    locks: LockSet,
    quota: Quota,
    instance: WorkflowInstance | None,
    task: Task,
    attempt: Attempt,
    outcome: str,
    result: str,
    retryable: bool,
) -> Completion:
    """The task attempt's report: late evidence when its lease was lost, else its outcome (requeue or finish)."""
    if attempt.state == AttemptState.UNKNOWN:
        # The instance and the task stay unwritten: the report decides nothing on them. UNKNOWN is final (a review
        # only closes its lease), and the evidence only adds rows under unique keys that certification compares:
        # the task's stream (task, seq) and the timeline (instance, sequence). Their locks order the additions on
        # one node; across nodes the stream's key does, since the first report is looked for after its position.
        late_result_record(locks=locks, task=task, attempt=attempt, outcome=outcome, result=result)
        return Completion(task=task, late=True)
    now = clock.now()
    attempt.state = outcome
    attempt.finished_at = now
    attempt.result = result
    attempt.retryable = retryable
    attempt.save()
    requeue = retryable and attempts_left(task) > 0 and (task.deadline_at is None or task.deadline_at > now)
    if requeue:
        task.state = TaskState.QUEUED
    else:
        task.state = outcome
        task.outcome = outcome
        task.result = result
        quota.release(task)
    touch(task, now)
    if instance is not None:
        touch(instance, now)
    if not requeue:
        result_event_publish(locks=locks, task=task, kind=ResultKind.RESULT, outcome=outcome, result=result)
    return Completion(task=task, late=False)


def task_lease_expire(*, attempt_id: str) -> bool:
    """A RUNNING attempt whose lease passed becomes UNKNOWN; its task NEEDS_REVIEW, keeping its permit.

    Writes an UNKNOWN result event. Never retries: the work may still be running somewhere.
    False when the attempt is no longer RUNNING or its lease was extended (nothing written).
    """
    row = Attempt.objects.filter(pk=attempt_id).values_list("task_id", flat=True).first()
    instance_id = Task.objects.filter(pk=row).values_list("source_instance_id", flat=True).first() if row else None
    if instance_id is None:
        return False

    def expire() -> bool:
        locks = LockSet()
        instance: WorkflowInstance | None = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
        if instance is None:
            return False
        task = locks.lock_one(Level.TASK, row)
        attempt = Attempt.objects.get(pk=attempt_id)
        now = clock.now()
        if attempt.state != AttemptState.RUNNING or attempt.lease_expires_at >= now:
            return False
        attempt.state = AttemptState.UNKNOWN
        attempt.save()
        task.state = TaskState.NEEDS_REVIEW
        touch(task, now)
        touch(instance, now)
        result_event_publish(locks=locks, task=task, kind=ResultKind.UNKNOWN)
        return True

    return atomic_with_retry(expire)


def task_settle_reviewed(
    *,
    locks: LockSet,
    task: Task,
    conclusion: str,
    result: str,
    now: dt.datetime,
    application: Application | None = None,
    queue: Queue | None = None,
) -> None:
    """A NEEDS_REVIEW task takes the operator's verified conclusion as its state, outcome and review conclusion,
    stores the result and is settled; its permit goes back to ``application`` and ``queue`` (locked) when it
    holds one. Its UNKNOWN attempts stay UNKNOWN: only their open lease is closed. No result event here: the
    caller publishes the REVIEWED event last in its transaction.
    """
    if task.state != TaskState.NEEDS_REVIEW:
        raise AssertionError(f"task {task.id} is {task.state}; only a NEEDS_REVIEW task is settled by review")
    if task.permit_held:
        if application is None or queue is None:
            raise AssertionError(f"task {task.id} holds a permit: its application and queue must be locked")
        permit_release(locks=locks, application=application, queue=queue, task=task)
    touch(
        task,
        now,
        state=conclusion,
        outcome=conclusion,
        result=result,
        review_conclusion=conclusion,
        execution_settled=True,
        permit_held=False,
    )
    Attempt.objects.filter(task_id=task.id, state=AttemptState.UNKNOWN, finished_at=None).update(finished_at=now)
