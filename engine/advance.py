"""Advancing the graph: activating ready steps, finishing the instance, applying continuations."""

import datetime as dt

from django.db import transaction

from core import clock, exactjson
from core.ids import ROOT_STEP_KEY
from core.metrics import STEP_RUNS, count
from engine.activation import step_activate
from engine.definitions import definition_of
from engine.quota import Quota, quota_of
from engine.state import gate_sync, touch
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Continuation,
    ContinuationState,
    Gate,
    InstanceState,
    Step,
    StepState,
    WorkflowDefinition,
    WorkflowInstance,
)


def instance_output(*, definition: WorkflowDefinition, steps: dict[str, Step]) -> str:
    """The output of a succeeded instance: ``{step key: step output}`` in definition order (exact JSON)."""
    return exactjson.dumps(
        {
            spec["key"]: exactjson.Raw(steps[spec["key"]].output)
            for spec in definition.spec["steps"]
            if steps[spec["key"]].output is not None
        }
    )


def instance_advance(
    *,
    locks: LockSet,
    quota: Quota,
    instance: WorkflowInstance,
    gate: Gate,
    definition: WorkflowDefinition,
    steps: dict[str, Step],
) -> bool:
    """Activate every PENDING step whose ``after`` steps all SUCCEEDED; finish the instance when all did.

    Only a RUNNING instance advances (none while NEEDS_REVIEW or stopping). A SIGNAL step that takes
    a buffered signal as it activates succeeds at once, so the steps after it are activated in the
    same call; one whose signal breaks the contract puts the instance in review, and nothing more
    starts. Returns False when a ready step could not start because its quota is full (it stays
    PENDING: the caller keeps its continuation pending and retries). Steps must be locked; the caller
    bumps the instance.
    """
    complete, started = True, True
    while started and instance.state == InstanceState.RUNNING:
        started = False
        for spec in definition.spec["steps"]:
            step = steps[spec["key"]]
            after_done = all(steps[k].state == StepState.SUCCEEDED for k in spec["after"])
            if step.state != StepState.PENDING or not after_done or instance.state != InstanceState.RUNNING:
                continue
            if not step_activate(locks=locks, quota=quota, instance=instance, gate=gate, step=step, spec=spec):
                complete = False
                continue
            labels = (definition.name, str(definition.version), spec["key"])
            transaction.on_commit(lambda labels=labels: count(STEP_RUNS, *labels))
            started = started or step.state == StepState.SUCCEEDED
    if instance.state != InstanceState.RUNNING:
        return complete
    if all(steps[spec["key"]].state == StepState.SUCCEEDED for spec in definition.spec["steps"]):
        now = clock.now()
        instance.state = InstanceState.SUCCEEDED
        instance.output = instance_output(definition=definition, steps=steps)
        instance.completed_at = now
        gate_sync(gate=gate, instance=instance)
        root = steps[ROOT_STEP_KEY]
        root.state = StepState.SUCCEEDED
        touch(root, now)
    return complete


def continuation_create(
    *,
    instance: WorkflowInstance,
    step_key: str = ROOT_STEP_KEY,
    kind: str = "ROOT",
    now: dt.datetime | None = None,
) -> Continuation:
    """Ask the runner to advance the instance (``$root``: a root continuation; else after that step)."""
    return Continuation.objects.create(instance=instance, step_key=step_key, kind=kind, created_at=now or clock.now())


def instance_lock_graph(
    *, locks: LockSet, instance_id: str, skip_locked: bool = False
) -> tuple[WorkflowInstance, Gate, WorkflowDefinition, Quota, dict[str, Step]] | None:
    """Lock instance → gate → every step of an instance, in order; None if busy or missing.

    The quota is the definition's, locked only if a permit is taken or given back.
    """
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=skip_locked)
    if instance is None:
        return None
    definition = definition_of(instance)
    quota = quota_of(locks=locks, definition=definition)
    gate = locks.lock_one(Level.GATE, instance_id)
    return instance, gate, definition, quota, locks.lock_steps_of(instance_id)


def continuations_apply(*, instance_id: str) -> int:
    """Apply an instance's PENDING continuations in one transaction: advance, then mark them APPLIED.

    A continuation blocked by a full quota stays PENDING so the next pass retries it. Returns how
    many were applied (0 when another runner holds the instance).
    """

    def apply() -> int:
        locks = LockSet()
        graph = instance_lock_graph(locks=locks, instance_id=instance_id, skip_locked=True)
        if graph is None:
            return 0
        instance, gate, definition, quota, steps = graph
        # Re-read under the instance lock: another runner may have applied them meanwhile.
        pending = list(Continuation.objects.filter(instance_id=instance_id, state=ContinuationState.PENDING))
        if not pending:
            return 0
        before = (instance.state, {key: step.revision for key, step in steps.items()})
        if not instance_advance(
            locks=locks, quota=quota, instance=instance, gate=gate, definition=definition, steps=steps
        ):
            if before != (instance.state, {key: step.revision for key, step in steps.items()}):
                touch(instance, clock.now())
            return 0
        now = clock.now()
        Continuation.objects.filter(id__in=[c.id for c in pending]).update(
            state=ContinuationState.APPLIED, applied_at=now
        )
        touch(instance, now)
        return len(pending)

    return atomic_with_retry(apply)
