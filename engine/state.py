"""Small shared transitions: revision bumps, the gate rule and entering review."""

import datetime as dt

from django.db import models

from history.models import (
    Activation,
    ActivationState,
    Gate,
    InstanceState,
    ReviewCause,
    Step,
    StepState,
    WorkflowInstance,
)
from history.signatures import signature_record


def touch(row: models.Model, now: dt.datetime, **changes) -> None:
    """Bump a row's revision (every change does; waits carry none) and its updated_at, then save it.

    With ``changes``, they are applied first and only they, the revision and updated_at are
    written: the row's other columns are left to whoever else holds them.
    """
    for name, value in changes.items():
        setattr(row, name, value)
    names = list(changes)
    if hasattr(row, "revision"):
        row.revision += 1
        names.append("revision")
    if hasattr(row, "updated_at"):
        row.updated_at = now
        names.append("updated_at")
    row.save(update_fields=names if changes else None)


def gate_sync(*, gate: Gate, instance: WorkflowInstance) -> bool:
    """Open the gate iff the instance is RUNNING and not paused; True (and saved) when it changed."""
    wanted = instance.state == InstanceState.RUNNING and not instance.paused
    if gate.open == wanted:
        return False
    gate.open = wanted
    gate.revision += 1
    gate.save()
    return True


def instance_enter_review(
    *,
    instance: WorkflowInstance,
    gate: Gate | None,
    reason: str,
    cause: ReviewCause,
    now: dt.datetime,
    step_key: str = "",
) -> None:
    """RUNNING or CANCELLING → NEEDS_REVIEW with the gate closed; the stop intent is kept.

    Entering review records why: the text ``reason``, the stable ``cause``, the step it concerns
    (blank for an instance-wide cause), since when, and the failure signature they make (one upsert).
    An instance already in review keeps its first reason, cause, step, signature and time; a finished
    instance is left alone. An instance whose gate is missing (corruption) has none to close. The
    caller bumps the instance revision (``touch``) at the end of its transaction.
    """
    if instance.state in (InstanceState.RUNNING, InstanceState.CANCELLING):
        instance.state = InstanceState.NEEDS_REVIEW
        instance.review_reason = reason[:1024]
        instance.review_cause = cause
        instance.review_step_key = step_key
        instance.review_since = now
        instance.failure_signature_id = signature_record(
            namespace_id=instance.namespace_id,
            definition_id=instance.definition_id,
            step_key=step_key,
            cause=cause,
            reason=instance.review_reason,
            root=instance.root_signature_id,
            now=now,
        )
        instance.root_signature_id = instance.root_signature_id or instance.failure_signature_id
    if gate is not None:
        gate_sync(gate=gate, instance=instance)


def step_enter_review(
    *,
    instance: WorkflowInstance,
    gate: Gate,
    step: Step,
    activation: Activation,
    reason: str,
    cause: ReviewCause,
    now: dt.datetime,
    failed: bool = False,
) -> None:
    """The step and its current activation stop — NEEDS_REVIEW, or FAILED when ``failed`` — and the instance
    enters review with ``reason`` and ``cause`` for this step. The caller saves the rows (``touch``)."""
    activation.state = ActivationState.FAILED if failed else ActivationState.NEEDS_REVIEW
    step.state = StepState.FAILED if failed else StepState.NEEDS_REVIEW
    instance_enter_review(instance=instance, gate=gate, reason=reason, cause=cause, now=now, step_key=step.key)


def step_conclude(
    *, step: Step, activation: Activation, conclusion: str, output: str | None, resolution: dict, now: dt.datetime
) -> None:
    """An operator's conclusion of a step in review: step and current activation take ``conclusion``
    (SUCCEEDED or FAILED) with ``output`` and the ``resolution`` record; the activation keeps the time it
    completed, if it had one. Saves both rows; the instance stays in review."""
    touch(
        activation,
        now,
        state=conclusion,
        output=output,
        resolution=resolution,
        completed_at=activation.completed_at or now,
    )
    touch(step, now, state=conclusion, output=output, resolution=resolution)


def instance_review_lift(
    *, instance: WorkflowInstance, gate: Gate, state: str, stop_kind: str | None, stop_reason: str
) -> None:
    """NEEDS_REVIEW → ``state`` (RUNNING, or CANCELLING to hand a stop to the stop path), the review reason,
    cause, step and time cleared and the gate synced to the new state. The caller bumps the instance revision."""
    if instance.state != InstanceState.NEEDS_REVIEW or state not in (InstanceState.RUNNING, InstanceState.CANCELLING):
        raise AssertionError(f"an instance leaves review for RUNNING or CANCELLING, not {instance.state} → {state}")
    instance.state, instance.stop_kind, instance.stop_reason = state, stop_kind, stop_reason
    instance.review_reason = ""
    instance.review_cause, instance.review_step_key, instance.review_since = "", "", None
    instance.failure_signature_id = None
    gate_sync(gate=gate, instance=instance)


def instance_control_touch(*, instance: WorkflowInstance, now: dt.datetime) -> None:
    """An operator's change of the instance: both its revision and its control revision advance (full save)."""
    instance.control_revision += 1
    touch(instance, now)


FINISHED = (InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.CANCELLED)
OPEN_STEP_STATES = (StepState.ACTIVE, StepState.WAITING)
