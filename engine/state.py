"""Small shared transitions: revision bumps, the gate rule and entering review."""

import datetime as dt

from django.db import models

from history.models import Gate, InstanceState, StepState, WorkflowInstance


def touch(row: models.Model, now: dt.datetime) -> None:
    """Bump a row's revision (every change does; waits carry none) and its updated_at, then save it."""
    if hasattr(row, "revision"):
        row.revision += 1
    if hasattr(row, "updated_at"):
        row.updated_at = now
    row.save()


def gate_sync(*, gate: Gate, instance: WorkflowInstance) -> bool:
    """Open the gate iff the instance is RUNNING and not paused; True (and saved) when it changed."""
    wanted = instance.state == InstanceState.RUNNING and not instance.paused
    if gate.open == wanted:
        return False
    gate.open = wanted
    gate.revision += 1
    gate.save()
    return True


def instance_enter_review(*, instance: WorkflowInstance, gate: Gate, reason: str) -> None:
    """RUNNING or CANCELLING → NEEDS_REVIEW with the gate closed; the stop intent is kept.

    An instance already in review keeps its first reason; a finished instance is left alone.
    The caller bumps the instance revision (``touch``) at the end of its transaction.
    """
    if instance.state in (InstanceState.RUNNING, InstanceState.CANCELLING):
        instance.state = InstanceState.NEEDS_REVIEW
        instance.review_reason = reason[:1024]
    gate_sync(gate=gate, instance=instance)


FINISHED = (InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.CANCELLED)
OPEN_STEP_STATES = (StepState.ACTIVE, StepState.WAITING)
