"""The one writer of audit rows: workflow operations, execution audits and signal operations,
and the one builder of the snapshots they record.

Every audit states who (actor), what (action, on the row named by ``target``), why (reason and
evidence), in which request, and the before → after snapshots; it is written in the same
transaction as the change it records and never rewritten. A snapshot of a row of a given kind is
always built by the same function here; the API answers ``before`` and ``after`` as stored:

- start and control (``workflow.start|pause|resume|cancel``): the instance summary the command
  answers, flat (start: before null);
- recovery (``workflow.<operation>``): one snapshot per row kind the operation changed, keyed by
  kind (``instance``, ``step``, ``activation``, ``task``, ``wait``, ``new_activation``, …);
- task review (``task.review``): the task's snapshot, flat;
- signal acceptance (``workflow.signal``): before null, after the acceptance snapshot.
- notes (``workflow.note``): before null, after the note; acknowledgement and assignment
  (``workflow.acknowledge|assign``): the review's attention before and after.
"""

import datetime as dt
from typing import Any, TypeVar

from core.times import format_optional_time, format_time
from history.models import (
    Activation,
    AuditRecord,
    Gate,
    Note,
    ReviewAttention,
    Signal,
    Step,
    Task,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
)

Audit = TypeVar("Audit", bound=AuditRecord)


def audit_write(
    *,
    model: type[Audit],
    namespace_id: str,
    actor_id: str,
    action: str,
    reason: str,
    before: dict | None,
    after: dict | None,
    now: dt.datetime,
    evidence_ref: str = "",
    request_id: str = "",
    **target: object,
) -> Audit:
    """Save one audit row of ``model``; ``target`` names what it is about (workflow, task, signal, …)."""
    return model.objects.create(
        namespace_id=namespace_id,
        actor_id=actor_id,
        action=action,
        reason=reason,
        evidence_ref=evidence_ref,
        request_id=request_id,
        before=before,
        after=after,
        created_at=now,
        **target,
    )


def instance_summary(instance: WorkflowInstance, definition: WorkflowDefinition) -> dict:
    """The answer of start and control commands (revisions as decimal strings, absent never null)."""
    data: dict[str, Any] = {
        "id": instance.id,
        "workflow_id": instance.id,
        "definition": {"name": definition.name, "version": definition.version},
        "state": instance.state,
        "paused": instance.paused,
        "revision": str(instance.revision),
        "control_revision": str(instance.control_revision),
        "business_key": instance.business_key,
        "created_at": format_time(instance.created_at),
    }
    if instance.stop_kind:
        data["stop_kind"] = instance.stop_kind
    if instance.deadline_at:
        data["deadline_at"] = format_time(instance.deadline_at)
    return data


def instance_snapshot(instance: WorkflowInstance, gate: Gate) -> dict:
    return {
        "state": instance.state,
        "paused": instance.paused,
        "stop_kind": instance.stop_kind,
        "revision": str(instance.revision),
        "control_revision": str(instance.control_revision),
        "gate_open": gate.open,
        "deadline_at": format_optional_time(instance.deadline_at),
    }


def step_snapshot(step: Step) -> dict:
    return {
        "id": step.id,
        "state": step.state,
        "revision": str(step.revision),
        "current_activation_id": step.current_activation_id,
        "output": step.output,
        "resolution": step.resolution,
    }


def activation_snapshot(activation: Activation) -> dict:
    return {
        "id": activation.id,
        "sequence": activation.sequence,
        "state": activation.state,
        "revision": str(activation.revision),
        "output": activation.output,
        "deadline_at": format_optional_time(activation.deadline_at),
        "latest_start_at": format_optional_time(activation.latest_start_at),
    }


def task_snapshot(task: Task) -> dict:
    return {
        "id": task.id,
        "state": task.state,
        "revision": str(task.revision),
        "attempt_count": task.attempt_count,
        "max_attempts": task.max_attempts,
        "permit_held": task.permit_held,
        "review_conclusion": task.review_conclusion,
        "deadline_at": format_optional_time(task.deadline_at),
    }


def wait_snapshot(wait: Wait) -> dict:
    return {
        "id": wait.id,
        "generation": wait.generation,
        "state": wait.state,
        "deadline_at": format_optional_time(wait.deadline_at),
        "fire_at": format_optional_time(wait.fire_at),
        "winner_signal_id": wait.winner_signal_id,
    }


def signal_snapshot(signal: Signal) -> dict:
    """The acceptance snapshot of a signal: what was accepted, by whom, for which step."""
    snapshot = {
        "signal_id": signal.id,
        "workflow_id": signal.workflow_id,
        "state": signal.state,
        "name": signal.name,
        "payload_version": signal.payload_version,
        "correlation_key": signal.correlation_key,
        "target_step_key": signal.target_step_key,
        "target_activation_sequence": signal.target_activation_sequence,
        "accepted_at": format_time(signal.accepted_at),
        "expires_at": format_time(signal.expires_at),
        "actor_id": signal.actor_id,
        "revision": str(signal.revision),
    }
    if signal.evidence_ref:
        snapshot["evidence_ref"] = signal.evidence_ref
    return snapshot


def note_snapshot(note: Note) -> dict:
    """A note as written (``workflow.note``'s after, and the API's answer): optional members absent when blank."""
    snapshot = {"id": note.id, "workflow_id": note.workflow_id, "text": note.text}
    if note.evidence_ref:
        snapshot["evidence_ref"] = note.evidence_ref
    if note.corrects_id:
        snapshot["corrects"] = note.corrects_id
    return snapshot | {"author": note.author, "created_at": format_time(note.created_at)}


def attention_snapshot(attention: ReviewAttention) -> dict:
    """Who acknowledged an instance's current review and who is on it (``workflow.acknowledge|assign``)."""
    snapshot = {"workflow_id": attention.instance_id, "review_since": format_time(attention.review_since)}
    if attention.acknowledged_by:
        snapshot["acknowledged_by"] = attention.acknowledged_by
        snapshot["acknowledged_at"] = format_time(attention.acknowledged_at)
    if attention.assignee:
        snapshot["assignee"] = attention.assignee
        snapshot["assigned_by"] = attention.assigned_by
        snapshot["assigned_at"] = format_time(attention.assigned_at)
    return snapshot
