"""The runner: one pass of every background duty, each item in its own transaction (SPEC §4).

Candidates are found with plain reads; each item is then re-checked under row locks taken in
the fixed order. Instances another runner holds are skipped (SKIP LOCKED) and picked up by a
later pass, so several runners can work side by side.
"""

import datetime as dt
from collections.abc import Callable

from django.db.models import Exists, OuterRef, Q

from engine.activation import poll_round_start
from engine.advance import continuation_create, continuations_apply, instance_lock_graph
from engine.inbox import inbox_consume_next, instances_with_pending_records
from engine.quota import permit_release, quota_lock_for_task
from engine.results import result_event_publish
from engine.signals import buffered_waits, wait_satisfy, wait_winner
from engine.state import gate_sync, instance_enter_review, touch
from engine.stop import instance_stop_settle
from engine.worker import task_lease_expire
from history import clock, exactjson
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Continuation,
    ContinuationState,
    Disposition,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    ResultKind,
    Signal,
    SignalState,
    StepKind,
    StepState,
    StopKind,
    Task,
    TaskState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowDefinition,
    WorkflowInstance,
)

BATCH = 100


def pass_lease_expiry() -> int:
    """RUNNING attempts whose lease passed → UNKNOWN (task NEEDS_REVIEW, UNKNOWN event)."""
    ids = Attempt.objects.filter(state=AttemptState.RUNNING, lease_expires_at__lt=clock.now()).values_list(
        "id", flat=True
    )[:BATCH]
    return sum(task_lease_expire(attempt_id=attempt_id) for attempt_id in list(ids))


def _task_deadline(task_id: str) -> bool:
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        return False
    locks = LockSet()
    quota = quota_lock_for_task(locks=locks, task=task)
    instance = locks.lock_one(Level.INSTANCE, task.source_instance_id, skip_locked=True)
    if instance is None:
        return False
    task = locks.lock_one(Level.TASK, task_id)
    now = clock.now()
    late = (task.deadline_at and task.deadline_at <= now) or (task.latest_start_at and task.latest_start_at <= now)
    if task.state != TaskState.QUEUED or not late:
        return False
    result = exactjson.dumps({"error": "deadline_exceeded", "message": "the task did not start before its deadline"})
    task.state = TaskState.FAILED
    task.outcome = TaskState.FAILED
    task.result = result
    permit_release(locks=locks, application=quota.application, queue=next(iter(quota.queues.values())), task=task)
    touch(task, now)
    touch(instance, now)
    result_event_publish(locks=locks, task=task, kind=ResultKind.RESULT, outcome=TaskState.FAILED, result=result)
    return True


def pass_task_deadlines() -> int:
    """QUEUED tasks past their deadline or latest start → FAILED (permit released, FAILED result event)."""
    now = clock.now()
    ids = Task.objects.filter(
        Q(deadline_at__lte=now) | Q(latest_start_at__lte=now), state=TaskState.QUEUED
    ).values_list("id", flat=True)[:BATCH]
    return sum(atomic_with_retry(lambda t=task_id: _task_deadline(t)) for task_id in list(ids))


def _instance_deadline(instance_id: str) -> bool:
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None or instance.state != InstanceState.RUNNING or instance.deadline_at > clock.now():
        return False
    gate = locks.lock_one(Level.GATE, instance_id)
    instance.stop_kind = StopKind.FAIL
    instance.stop_reason = "the instance deadline passed"
    instance.state = InstanceState.CANCELLING
    gate_sync(gate=gate, instance=instance)
    touch(instance, clock.now())
    return True


def pass_instance_deadlines() -> int:
    """RUNNING instances past their deadline → stop_kind FAIL, CANCELLING. In review: nothing is recorded."""
    ids = WorkflowInstance.objects.filter(state=InstanceState.RUNNING, deadline_at__lte=clock.now()).values_list(
        "id", flat=True
    )[:BATCH]
    return sum(atomic_with_retry(lambda i=instance_id: _instance_deadline(i)) for instance_id in list(ids))


def _with_wait(instance_id: str, wait_id: str, apply: Callable) -> bool:
    """Lock instance → gate → step → activation → wait of one wait and apply a transition to them."""
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        return False
    gate = locks.lock_one(Level.GATE, instance_id)
    wait = Wait.objects.filter(pk=wait_id).first()
    step = locks.lock_one(Level.STEP, wait.step_id)
    activation = locks.lock_one(Level.ACTIVATION, wait.activation_id)
    wait = locks.lock_one(Level.WAIT, wait_id)
    if wait.state != WaitState.WAITING or step.current_activation_id != activation.id:
        return False
    definition = WorkflowDefinition.objects.get(pk=instance.definition_id)
    now = clock.now()
    if not apply(instance, gate, step, activation, wait, definition.step_spec(step.key), now):
        return False
    for row in (step, activation, wait):
        touch(row, now)
    touch(instance, now)
    return True


def _wait_review(instance, gate, step, activation, wait, reason: str) -> None:
    wait.state = WaitState.NEEDS_REVIEW if wait.kind == WaitKind.TIMER else WaitState.EXPIRED
    activation.state = ActivationState.NEEDS_REVIEW
    step.state = StepState.NEEDS_REVIEW
    instance_enter_review(instance=instance, gate=gate, reason=reason)


def _fire_timer(instance, gate, step, activation, wait, spec, now) -> bool:
    late = now > wait.fire_at + dt.timedelta(seconds=spec["max_lateness_seconds"])
    # A re-armed generation was verified by an operator: it fires without the lateness check.
    if late and wait.generation == 1:
        _wait_review(instance, gate, step, activation, wait, f"timer {step.key} was first seen too late to fire")
        return True
    wait.state = WaitState.SATISFIED
    activation.state = ActivationState.SUCCEEDED
    activation.output = "null"
    activation.completed_at = now
    step.state = StepState.SUCCEEDED
    step.output = "null"
    continuation_create(instance=instance, step_key=step.key, kind="STEP")
    return True


def pass_timers() -> int:
    """Due TIMER waits fire (step SUCCEEDED, output null) unless first seen later than max_lateness."""
    rows = Wait.objects.filter(state=WaitState.WAITING, kind=WaitKind.TIMER, fire_at__lte=clock.now()).values_list(
        "instance_id", "id"
    )[:BATCH]
    return sum(atomic_with_retry(lambda i=i, w=w: _with_wait(i, w, _fire_timer)) for i, w in list(rows))


def _expire_wait(instance, gate, step, activation, wait, spec, now) -> bool:
    if wait.deadline_at > now:
        return False
    _wait_review(instance, gate, step, activation, wait, f"the wait of step {step.key} passed its deadline")
    return True


def pass_wait_deadlines() -> int:
    """WAITING signal waits past their deadline → wait EXPIRED, activation, step and instance NEEDS_REVIEW."""
    rows = Wait.objects.filter(
        state=WaitState.WAITING, kind__in=(WaitKind.SIGNAL, WaitKind.POLL_FINAL_SIGNAL), deadline_at__lt=clock.now()
    ).values_list("instance_id", "id")[:BATCH]
    return sum(atomic_with_retry(lambda i=i, w=w: _with_wait(i, w, _expire_wait)) for i, w in list(rows))


def _match_buffered(instance, gate, step, activation, wait, spec, now) -> bool:
    winner = wait_winner(wait=wait, activation=activation, step=step)
    if winner is None:
        return False
    wait_satisfy(
        instance=instance, gate=gate, step=step, activation=activation, wait=wait, signal=winner, step_spec=spec
    )
    return True


def pass_buffered_signals() -> int:
    """A WAITING signal wait takes the oldest matching buffered signal of its step (e.g. a new generation)."""
    return sum(atomic_with_retry(lambda i=i, w=w: _with_wait(i, w, _match_buffered)) for i, w in buffered_waits())


def _expire_signal(instance_id: str, signal_id: str) -> bool:
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        return False
    signal = Signal.objects.get(pk=signal_id)
    now = clock.now()
    if signal.state != SignalState.PENDING or signal.expires_at > now:
        return False
    signal.state = SignalState.EXPIRED
    signal.disposition = Disposition.EXPIRED
    touch(signal, now)
    touch(instance, now)
    return True


def pass_signal_expiry() -> int:
    """PENDING signals past expires_at (their record already consumed) → EXPIRED."""
    consumed = InboxRecord.objects.filter(
        source_kind=InboxSource.SIGNAL, source_id=OuterRef("id"), state=InboxState.CONSUMED
    )
    rows = (
        Signal.objects.filter(state=SignalState.PENDING, expires_at__lte=clock.now())
        .filter(Exists(consumed))
        .values_list("workflow_id", "id")[:BATCH]
    )
    return sum(atomic_with_retry(lambda i=i, s=s: _expire_signal(i, s)) for i, s in list(rows))


def _poll_round(instance_id: str, activation_id: str) -> bool:
    locks = LockSet()
    graph = instance_lock_graph(locks=locks, instance_id=instance_id, skip_locked=True)
    if graph is None:
        return False
    instance, gate, definition, quota, steps = graph
    activation = locks.lock_one(Level.ACTIVATION, activation_id)
    step = next((s for s in steps.values() if s.id == activation.step_id), None)
    now = clock.now()
    if (
        instance.state != InstanceState.RUNNING
        or step is None
        or step.current_activation_id != activation.id
        or activation.state != ActivationState.WAITING
        or activation.wait_id is not None
        or activation.next_round_at is None
        or activation.next_round_at > now
    ):
        return False
    if now >= activation.poll_deadline_at:
        activation.state = ActivationState.NEEDS_REVIEW
        step.state = StepState.NEEDS_REVIEW
        instance_enter_review(instance=instance, gate=gate, reason=f"poll step {step.key} passed its poll deadline")
    elif (
        poll_round_start(
            locks=locks, quota=quota, instance=instance, activation=activation, spec=definition.step_spec(step.key)
        )
        is None
    ):
        return False  # quota full: the round stays due and the next pass retries it
    else:
        step.state = StepState.ACTIVE
    touch(activation, now)
    touch(step, now)
    touch(instance, now)
    return True


def pass_poll_rounds() -> int:
    """POLL activations whose next round is due open it (a query task per round) on RUNNING instances."""
    rows = (
        Activation.objects.filter(
            state=ActivationState.WAITING, next_round_at__lte=clock.now(), wait__isnull=True, step__kind=StepKind.POLL
        )
        .filter(instance__state=InstanceState.RUNNING)
        .values_list("instance_id", "id")[:BATCH]
    )
    return sum(atomic_with_retry(lambda i=i, a=a: _poll_round(i, a)) for i, a in list(rows))


def pass_inbox() -> int:
    """Consume PENDING inbox records, oldest first per instance, one record per transaction."""
    consumed = 0
    for instance_id in instances_with_pending_records(limit=BATCH):
        while inbox_consume_next(instance_id=instance_id) is not None:
            consumed += 1
    return consumed


def pass_continuations() -> int:
    """Apply PENDING continuations: advance the graph (activate ready steps, finish the instance)."""
    ids = Continuation.objects.filter(state=ContinuationState.PENDING).values_list("instance_id", flat=True)
    return sum(continuations_apply(instance_id=i) for i in dict.fromkeys(list(ids[: BATCH * 4])))


def pass_stop_settlement() -> int:
    """Settle CANCELLING instances: cancel queued work, wait for running work, then CANCELLED / FAILED."""
    ids = WorkflowInstance.objects.filter(state=InstanceState.CANCELLING).values_list("id", flat=True)[:BATCH]
    return sum(instance_stop_settle(instance_id=i) for i in list(ids))


PASSES: dict[str, Callable[[], int]] = {
    "lease_expiry": pass_lease_expiry,
    "task_deadlines": pass_task_deadlines,
    "instance_deadlines": pass_instance_deadlines,
    "timers": pass_timers,
    "wait_deadlines": pass_wait_deadlines,
    "signal_expiry": pass_signal_expiry,
    "inbox": pass_inbox,
    "buffered_signals": pass_buffered_signals,
    "poll_rounds": pass_poll_rounds,
    "continuations": pass_continuations,
    "stop_settlement": pass_stop_settlement,
}


def runner_pass() -> dict[str, int]:
    """One pass of every duty, in a fixed order; returns how many items each pass handled."""
    return {name: run() for name, run in PASSES.items()}


def runner_settle(*, max_passes: int = 20) -> int:
    """Run passes until one handles nothing (or ``max_passes``); returns the number of passes run."""
    for number in range(1, max_passes + 1):
        if not any(runner_pass().values()):
            return number
    return max_passes
