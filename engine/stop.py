"""The stop path: settling a CANCELLING instance, after a cancel or its deadline."""

from core import clock
from core.ids import ROOT_STEP_KEY
from engine.advance import instance_lock_graph
from engine.state import OPEN_STEP_STATES, gate_sync, touch
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Activation,
    ActivationState,
    InboxRecord,
    InboxState,
    InstanceState,
    StepState,
    StopKind,
    Task,
    TaskState,
    Wait,
    WaitState,
)

_OPEN_ACTIVATIONS = (ActivationState.ACTIVE, ActivationState.WAITING)


def instance_stop_settle(*, instance_id: str) -> bool:
    """One stop-runner step for a CANCELLING instance, in one transaction; True when it finished.

    Cancels QUEUED tasks (permits released) and WAITING waits with their activations, then —
    only when no task is LEASED or NEEDS_REVIEW and the inbox holds no PENDING record — cancels
    what is left open and enters CANCELLED (stop_kind CANCEL) or FAILED (stop_kind FAIL).
    Instances in review are ignored (Continue hands them back to this path).
    """
    return atomic_with_retry(lambda: _settle(instance_id))


def _settle(instance_id: str) -> bool:
    locks = LockSet()
    graph = instance_lock_graph(locks=locks, instance_id=instance_id, skip_locked=True)
    if graph is None:
        return False
    instance, gate, _, quota, steps = graph
    if instance.state != InstanceState.CANCELLING:
        return False
    now = clock.now()
    activation_ids = Activation.objects.filter(instance_id=instance_id, state__in=_OPEN_ACTIVATIONS).values_list(
        "id", flat=True
    )
    activations = locks.lock(Level.ACTIVATION, activation_ids)
    wait_ids = Wait.objects.filter(instance_id=instance_id, state=WaitState.WAITING).values_list("id", flat=True)
    waits = locks.lock(Level.WAIT, wait_ids)
    task_ids = Task.objects.filter(
        source_instance_id=instance_id, state__in=(TaskState.QUEUED, TaskState.LEASED, TaskState.NEEDS_REVIEW)
    ).values_list("id", flat=True)
    tasks = locks.lock(Level.TASK, task_ids)
    busy_activations = set()
    changed = bool(waits)
    for task in tasks.values():
        if task.state == TaskState.QUEUED:
            task.state = TaskState.CANCELLED
            task.outcome = TaskState.CANCELLED
            quota.release(task)
            touch(task, now)
            changed = True
        else:
            busy_activations.add(task.source_activation_id)
    for wait in waits.values():
        wait.state = WaitState.CANCELLED
        touch(wait, now)
    awaiting_records = set(
        InboxRecord.objects.filter(instance_id=instance_id, state=InboxState.PENDING).values_list(
            "activation_id", flat=True
        )
    )
    settled = not busy_activations and not awaiting_records
    steps_by_id = {step.id: step for step in steps.values()}
    for activation in activations.values():
        # Work still running, or a result not yet consumed, keeps its activation open.
        if activation.id in busy_activations or activation.id in awaiting_records:
            continue
        activation.state = ActivationState.CANCELLED
        activation.completed_at = now
        touch(activation, now)
        changed = True
        step = steps_by_id.get(activation.step_id)
        if step is not None and step.current_activation_id == activation.id and step.state in OPEN_STEP_STATES:
            step.state = StepState.CANCELLED
            touch(step, now)
    if settled:
        for key, step in steps.items():
            if key != ROOT_STEP_KEY and step.state in OPEN_STEP_STATES:
                step.state = StepState.CANCELLED
                touch(step, now)
        final = InstanceState.CANCELLED if instance.stop_kind == StopKind.CANCEL else InstanceState.FAILED
        instance.state = final
        instance.completed_at = now
        gate_sync(gate=gate, instance=instance)
        root = steps[ROOT_STEP_KEY]
        root.state = StepState.CANCELLED if final == InstanceState.CANCELLED else StepState.FAILED
        touch(root, now)
    if changed or settled:
        touch(instance, now)
    return settled
