"""Response bodies of the history read API, field by field.

Absent, never null: an optional field is left out when it has no value. Revisions are
decimal strings, times go through ``format_time``, and client JSON is embedded byte-exact
as ``Raw`` (a NULL column is an absent output; the text ``null`` an explicit one).
"""

from core.exactjson import Raw
from core.ids import ROOT_STEP_KEY
from core.times import format_time
from history.audits import attention_snapshot, note_snapshot
from history.models import (
    Activation,
    Attempt,
    InstanceEvent,
    PollRound,
    Signal,
    SignalOperation,
    Step,
    StepKind,
    Task,
    Wait,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.activations import ActivationDetail, ActivationPage, PollRoundPage
from history.selectors.annotations import NotePage
from history.selectors.events import EventPage
from history.selectors.instance_list import ReviewSummary
from history.selectors.instances import InstanceDetail, LateEvidence, TaskDetail
from history.selectors.operations import WorkflowOperationPage
from history.selectors.pagination import Page
from history.selectors.signals import SignalPage
from history.selectors.steps import CurrentStep
from history.selectors.tasks import TaskSource


def _optional(data: dict, key: str, value: object) -> None:
    if value is not None and value != "":
        data[key] = value


def _time(data: dict, key: str, value) -> None:
    if value is not None:
        data[key] = format_time(value)


def _exact(data: dict, key: str, text: str | None) -> None:
    if text is not None:
        data[key] = Raw(text)


def _page(data: dict, *, items: list, next_cursor: str | None) -> dict:
    data["items"] = items
    _optional(data, "next_cursor", next_cursor)
    return data


def activation_item(activation: Activation, *, kind: str) -> dict:
    data = {
        "id": activation.id,
        "step_id": activation.step_id,
        "sequence": activation.sequence,
        "state": activation.state,
        "revision": str(activation.revision),
    }
    if kind == StepKind.TASK:
        _optional(data, "task_id", activation.task_id)
    data["created_at"] = format_time(activation.created_at)
    data["updated_at"] = format_time(activation.updated_at)
    _time(data, "completed_at", activation.completed_at)
    return data


def task_summary(task: Task) -> dict:
    return {
        "id": task.id,
        "state": task.state,
        "revision": str(task.revision),
        "attempt_count": task.attempt_count,
        "max_attempts": task.max_attempts,
    }


def step_view(view: CurrentStep) -> dict:
    step = view.step
    data = {"id": step.id, "key": step.key, "kind": step.kind, "state": step.state, "revision": str(step.revision)}
    _optional(data, "current_activation_id", step.current_activation_id)
    _optional(data, "resolution", step.resolution)
    if view.current_activation is not None:
        current = activation_item(view.current_activation, kind=step.kind)
        if view.task is not None:
            current["task"] = task_summary(view.task)
        data["current_activation"] = current
    return data


def poll_section(activation: Activation) -> dict:
    data = {
        "first_round": activation.first_round,
        "first_round_attempts_used": activation.first_round_attempts_used,
        "used_rounds": activation.used_rounds,
        "max_rounds": activation.max_rounds,
        "attempts_per_round": activation.attempts_per_round,
        "interval_seconds": activation.interval_seconds,
        "poll_deadline_at": format_time(activation.poll_deadline_at),
        "round_deadline_at": format_time(activation.round_deadline_at),
    }
    _optional(data, "last_task_id", activation.last_task_id)
    _time(data, "next_round_at", activation.next_round_at)
    _optional(data, "last_round_classification", activation.last_round_classification)
    return data


def wait_section(wait: Wait) -> dict:
    data = {
        "id": wait.id,
        "kind": wait.kind,
        "generation": wait.generation,
        "state": wait.state,
        "deadline_at": format_time(wait.deadline_at),
    }
    _time(data, "fire_at", wait.fire_at)
    _optional(data, "winner_signal_id", wait.winner_signal_id)
    return data


def activation_detail(detail: ActivationDetail) -> dict:
    activation = detail.activation
    data = {
        "instance_id": detail.instance.id,
        "revision": str(detail.instance.revision),
        "step": step_view(detail.step),
        "activation": activation_item(activation, kind=detail.step.step.kind),
        "input": Raw(activation.input),
    }
    _exact(data, "output", activation.output)
    if detail.poll is not None:
        data["poll"] = poll_section(detail.poll)
    if detail.wait is not None:
        data["wait"] = wait_section(detail.wait)
    return data


def poll_round_item(poll_round: PollRound) -> dict:
    return {
        "id": poll_round.id,
        "activation_id": poll_round.activation_id,
        "round": poll_round.round,
        "task_id": poll_round.task_id,
        "created_at": format_time(poll_round.created_at),
    }


def signal_item(signal: Signal) -> dict:
    data = {
        "id": signal.id,
        "workflow_id": signal.workflow_id,
        "revision": str(signal.revision),
        "name": signal.name,
        "payload_version": signal.payload_version,
        "target_step_key": signal.target_step_key,
        "target_activation_sequence": signal.target_activation_sequence,
        "state": signal.state,
        "accepted_at": format_time(signal.accepted_at),
        "expires_at": format_time(signal.expires_at),
    }
    _optional(data, "disposition", signal.disposition)
    return data


def signal_detail(signal: Signal) -> dict:
    data = signal_item(signal)
    data["payload"] = Raw(signal.payload)
    data["correlation_key"] = signal.correlation_key
    data["actor_id"] = signal.actor_id
    _optional(data, "evidence_ref", signal.evidence_ref)
    _optional(data, "consumed_wait_id", signal.consumed_wait_id)
    return data


def signal_operation_item(record: SignalOperation) -> dict:
    return {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "signal_id": record.signal_id,
        "operation_id": record.operation_id,
        "actor_id": record.actor_id,
        "action": record.action,
        "created_at": format_time(record.created_at),
    }


def _reason_and_snapshots(data: dict, record) -> dict:
    data["reason"] = record.reason
    _optional(data, "evidence_ref", record.evidence_ref)
    data["before"] = record.before
    data["after"] = record.after
    return data


def signal_operation_detail(record: SignalOperation) -> dict:
    return _reason_and_snapshots(signal_operation_item(record), record)


def workflow_operation_item(record: WorkflowOperation) -> dict:
    data = {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "operation_id": record.operation_id,
        "actor_id": record.actor_id,
        "action": record.action,
    }
    _optional(data, "step_key", record.step_key)
    _optional(data, "activation_id", record.activation_id)
    _optional(data, "execution_audit_id", record.execution_audit_id)
    _reason_and_snapshots(data, record)
    data["created_at"] = format_time(record.created_at)
    return data


def instance_detail(detail: InstanceDetail, eligibility: dict) -> dict:
    instance = detail.instance
    data = {
        "id": instance.id,
        "namespace": detail.namespace,
        "definition": {"name": instance.definition.name, "version": instance.definition.version},
        "state": instance.state,
        "paused": instance.paused,
    }
    _optional(data, "stop_kind", instance.stop_kind)
    data["revision"] = str(instance.revision)
    data["control_revision"] = str(instance.control_revision)
    _time(data, "deadline_at", instance.deadline_at)
    _optional(data, "review_reason", instance.review_reason)
    _optional(data, "review_cause", instance.review_cause)
    _optional(data, "review_step_key", instance.review_step_key)
    _time(data, "review_since", instance.review_since)
    data["created_at"] = format_time(instance.created_at)
    data["updated_at"] = format_time(instance.updated_at)
    _time(data, "completed_at", instance.completed_at)
    data["steps"] = [step_view(view) for view in detail.steps]
    data["eligibility"] = eligibility
    return data


def attempt_item(attempt: Attempt) -> dict:
    data = {
        "id": attempt.id,
        "number": attempt.number,
        "worker": attempt.worker,
        "state": attempt.state,
        "started_at": format_time(attempt.started_at),
    }
    _time(data, "lease_expires_at", attempt.lease_expires_at)
    _time(data, "finished_at", attempt.finished_at)
    _exact(data, "result", attempt.result)
    evidence = getattr(attempt, "late_evidence", None)
    if evidence is not None:
        data["late_evidence"] = _late_evidence(evidence)
    return data


def _late_evidence(evidence: LateEvidence) -> dict:
    data = {"event_id": evidence.event_id, "seq": evidence.seq, "outcome": evidence.outcome}
    _exact(data, "result", evidence.result)
    data["recorded_at"] = format_time(evidence.recorded_at)
    return data


def late_evidence_item(evidence: LateEvidence) -> dict:
    data = _late_evidence(evidence)
    _optional(data, "attempt_id", evidence.attempt_id)
    return data


def task_links(*, instance_id: str, step: Step, activation_id: str, task_id: str) -> dict:
    """The reads around one task, as paths of this API: the same links in its execution history and its source."""
    workflow = f"/v1/workflows/{instance_id}"
    activation = f"{workflow}/steps/{step.key}/activations/{activation_id}"
    links = {
        "instance": workflow,
        "activation": activation,
        "task": f"{workflow}/tasks/{task_id}",
        "source": f"/v1/tasks/{task_id}/source",
    }
    if step.kind == StepKind.POLL:
        links["rounds"] = f"{activation}/rounds"
    return links


def task_detail(detail: TaskDetail) -> dict:
    task = detail.task
    body = {
        "id": task.id,
        "step_key": detail.step.key,
        "activation_id": detail.activation.id,
        "activation_sequence": detail.activation.sequence,
    }
    _optional(body, "round", task.source_round)
    body.update(
        {
            "queue": detail.instance.definition.step_spec(detail.step.key)["queue"],
            "handler": task.handler,
            "priority": task.priority,
            "state": task.state,
            "revision": str(task.revision),
            "attempt_count": task.attempt_count,
            "max_attempts": task.max_attempts,
        }
    )
    _time(body, "deadline_at", task.deadline_at)
    _time(body, "latest_start_at", task.latest_start_at)
    body["input"] = Raw(task.input)
    _optional(body, "outcome", task.outcome)
    _exact(body, "result", task.result)
    _optional(body, "review_conclusion", task.review_conclusion)
    body["execution_settled"] = task.execution_settled
    body["permit_held"] = task.permit_held
    _optional(body, "retry_of", task.retry_of_id)
    body["created_at"] = format_time(task.created_at)
    body["updated_at"] = format_time(task.updated_at)
    body["attempts"] = [attempt_item(attempt) for attempt in detail.attempts]
    body["late_evidence"] = [late_evidence_item(evidence) for evidence in detail.late_evidence]
    body["links"] = task_links(
        instance_id=detail.instance.id, step=detail.step, activation_id=detail.activation.id, task_id=task.id
    )
    return {"instance_id": detail.instance.id, "revision": str(detail.instance.revision), "task": body}


def task_source(source: TaskSource) -> dict:
    task, activation, instance = source.task, source.activation, source.instance
    data = {
        "task_id": task.id,
        "namespace": source.namespace,
        "instance_id": instance.id,
        "definition": {"name": instance.definition.name, "version": instance.definition.version},
        "step_key": source.step.key,
        "activation": {"id": activation.id, "sequence": activation.sequence},
    }
    if source.poll_round_id is not None:
        data["poll_round"] = {"id": source.poll_round_id, "round": task.source_round}
    data["queue"] = task.queue_name
    _optional(data, "retry_of", task.retry_of_id)
    data["links"] = task_links(instance_id=instance.id, step=source.step, activation_id=activation.id, task_id=task.id)
    return data


# Pages: the parents as read, the instance revision read for this page, the items, the cursor.


def activation_page(result: ActivationPage, *, next_cursor: str | None) -> dict:
    data = {"instance_id": result.instance.id, "revision": str(result.instance.revision), "step_id": result.step.id}
    _optional(data, "current_activation_id", result.step.current_activation_id)
    items = [activation_item(a, kind=result.step.kind) for a in result.page.items]
    return _page(data, items=items, next_cursor=next_cursor)


def poll_round_page(result: PollRoundPage, *, next_cursor: str | None) -> dict:
    data = {
        "instance_id": result.instance.id,
        "revision": str(result.instance.revision),
        "activation_id": result.activation.id,
    }
    return _page(data, items=[poll_round_item(r) for r in result.page.items], next_cursor=next_cursor)


def signal_page(result: SignalPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return _page(data, items=[signal_item(s) for s in result.page.items], next_cursor=next_cursor)


def signal_operation_page(page: Page[SignalOperation], *, next_cursor: str | None) -> dict:
    # Items and cursor only, no parent fields: each item names its workflow and signal itself.
    return _page({}, items=[signal_operation_item(r) for r in page.items], next_cursor=next_cursor)


def workflow_operation_page(result: WorkflowOperationPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return _page(data, items=[workflow_operation_item(r) for r in result.page.items], next_cursor=next_cursor)


def event_links(event: InstanceEvent) -> dict:
    """The detail reads of an event's subject (and of the task, activation or signal it belongs to)."""
    workflow = f"/v1/workflows/{event.instance_id}"
    subject, key = event.subject_type, event.step_key
    step = f"{workflow}/steps/{key}" if key and key != ROOT_STEP_KEY else None
    links: dict[str, str] = {}
    if subject == "instance":
        links["workflow"] = workflow
    if subject == "step" and step:
        links["activations"] = f"{step}/activations"
    activation_id = event.subject_id if subject == "activation" else event.parent_activation_id
    if activation_id and step:
        links["activation"] = f"{step}/activations/{activation_id}"
    task_id = event.subject_id if subject == "task" else event.parent_task_id
    if task_id:
        links["task"] = f"{workflow}/tasks/{task_id}"
    signal_id = event.subject_id if subject == "signal" else event.parent_signal_id
    if signal_id:
        links["signal"] = f"{workflow}/signals/{signal_id}"
    if event.audit_record == "signal_operation" and signal_id:
        links["signal_operation"] = f"{workflow}/signals/{signal_id}/operations/{event.subject_id}"
    if event.audit_record == "workflow_operation":
        links["operations"] = f"{workflow}/operations"
    return links


def event_item(event: InstanceEvent) -> dict:
    subject = {"type": event.subject_type, "id": event.subject_id}
    _optional(subject, "step_key", event.step_key)
    data = {"sequence": event.sequence, "kind": event.kind, "subject": subject}
    _optional(data, "before", event.before)
    _optional(data, "after", event.after)
    _optional(data, "detail", event.detail)
    actor = {"kind": event.actor_kind}
    _optional(actor, "id", event.actor_id)
    data["actor"] = actor
    _optional(data, "operation_id", event.operation_id)
    _optional(data, "audit_id", event.audit_id)
    data["reconstructed"] = event.reconstructed
    data["created_at"] = format_time(event.created_at)
    data["links"] = event_links(event)
    return data


def event_page(result: EventPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return _page(data, items=[event_item(e) for e in result.page.items], next_cursor=next_cursor)


def _definition_ref(definition) -> dict:
    return {"name": definition.name, "version": definition.version}


def instance_item(instance: WorkflowInstance) -> dict:
    data = {
        "id": instance.id,
        "definition": _definition_ref(instance.definition),
        "state": instance.state,
        "paused": instance.paused,
    }
    _optional(data, "review_cause", instance.review_cause)
    _optional(data, "review_step_key", instance.review_step_key)
    _optional(data, "stop_kind", instance.stop_kind)
    data["business_key"] = instance.business_key
    data["revision"] = str(instance.revision)
    data["created_at"] = format_time(instance.created_at)
    data["updated_at"] = format_time(instance.updated_at)
    _time(data, "review_since", instance.review_since)
    return data


def instance_page(page: Page[WorkflowInstance], *, next_cursor: str | None) -> dict:
    return _page({}, items=[instance_item(i) for i in page.items], next_cursor=next_cursor)


def review_summary(summary: ReviewSummary) -> dict:
    return {
        "total": summary.total,
        "causes": [{"review_cause": cause, "count": count} for cause, count in summary.causes],
        "definitions": [
            {"definition": _definition_ref(definition), "count": count} for definition, count in summary.definitions
        ],
        "definitions_truncated": summary.definitions_truncated,
    }


def note_page(result: NotePage, *, next_cursor: str | None) -> dict:
    """The notes, newest first, after the current review's acknowledgement and assignment (absent when none)."""
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    if result.attention is not None:
        data["attention"] = attention_snapshot(result.attention)
    return _page(data, items=[note_snapshot(note) for note in result.page.items], next_cursor=next_cursor)
