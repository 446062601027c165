"""An instance's timeline: its events in sequence order, their filters and the links to the detail reads."""

import re

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from api.resources import optional, paged
from api.schema import IdField, RevisionField, TimeField
from core.ids import ROOT_STEP_KEY, STEP_KEY_PATTERN
from core.times import format_time
from history.events import KINDS, SUBJECT_TYPES
from history.models import InstanceEvent
from history.selectors import events as event_reads
from history.selectors.events import MAX_SEQUENCE, ORDERS

EVENT_FILTERS = ("kind", "step_key", "after_sequence", "order")
EVENT_FILTER_PARAMETERS = [
    OpenApiParameter(
        "kind",
        {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
        style="form",
        explode=True,
        description="only events of these kinds; repeat the parameter for several",
    ),
    OpenApiParameter(
        "step_key",
        {"type": "string", "pattern": f"^(?:{re.escape(ROOT_STEP_KEY)}|{STEP_KEY_PATTERN.pattern})$"},
        description="only events of this step (a step key of the definition, or $root)",
    ),
    OpenApiParameter(
        "after_sequence",
        {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE},
        description="only events after this sequence; decimal without sign or leading zero",
    ),
    OpenApiParameter(
        "order",
        {"type": "string", "enum": list(ORDERS)},
        description="by sequence: asc (default, oldest first) or desc; a cursor is bound to the filters and order",
    ),
]


class EventSubject(serializers.Serializer):
    type = serializers.ChoiceField(choices=sorted(set(SUBJECT_TYPES.values())))
    id = IdField()
    step_key = serializers.CharField(required=False, help_text="absent for instance-wide subjects; $root included")


class EventActor(serializers.Serializer):
    kind = serializers.CharField(help_text="engine, worker, client or operator")
    id = serializers.CharField(required=False, help_text="the worker id or actor id; absent for the engine")


class EventLinks(serializers.Serializer):
    workflow = serializers.CharField(required=False, help_text="instance events: the instance")
    activations = serializers.CharField(required=False, help_text="step events: the step's activations")
    activation = serializers.CharField(required=False, help_text="the activation of the subject (or the subject)")
    task = serializers.CharField(required=False, help_text="the execution history of the subject's task")
    signal = serializers.CharField(required=False, help_text="the signal of the subject (or the subject)")
    signal_operation = serializers.CharField(required=False, help_text="a signal audit record")
    operations = serializers.CharField(required=False, help_text="a workflow audit record: the workflow audit")


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


class EventItem(serializers.Serializer):
    sequence = serializers.IntegerField(min_value=1, max_value=MAX_SEQUENCE, help_text="gap-free per instance")
    kind = serializers.ChoiceField(choices=list(KINDS))
    subject = EventSubject()
    before = serializers.CharField(required=False, help_text="the subject's state before; absent for a creation")
    after = serializers.CharField(required=False, help_text="the subject's state after; absent without a state")
    detail = serializers.CharField(
        required=False, help_text="review cause, inbox disposition, result kind (or LATE) or audit action"
    )
    actor = EventActor()
    operation_id = IdField(required=False)
    audit_id = IdField(required=False)
    repair = serializers.CharField(
        required=False,
        help_text="the recovery operation that made this change (retry-step, resolve-step, …): a state a person "
        "produced, not the engine by itself; absent otherwise",
    )
    reconstructed = serializers.BooleanField(help_text="rebuilt from the rows that existed before the timeline")
    created_at = TimeField()
    links = EventLinks(help_text="paths of the detail reads; no payload is part of an event")


def event_item(event: InstanceEvent) -> dict:
    subject = {"type": event.subject_type, "id": event.subject_id}
    optional(subject, "step_key", event.step_key)
    data = {"sequence": event.sequence, "kind": event.kind, "subject": subject}
    optional(data, "before", event.before)
    optional(data, "after", event.after)
    optional(data, "detail", event.detail)
    actor = {"kind": event.actor_kind}
    optional(actor, "id", event.actor_id)
    data["actor"] = actor
    optional(data, "operation_id", event.operation_id)
    optional(data, "audit_id", event.audit_id)
    optional(data, "repair", event.repair)
    data["reconstructed"] = event.reconstructed
    data["created_at"] = format_time(event.created_at)
    data["links"] = event_links(event)
    return data


class EventPage(serializers.Serializer):
    workflow_id = IdField()
    revision = RevisionField()
    items = EventItem(many=True)
    next_cursor = serializers.CharField(required=False)


def event_page(result: event_reads.EventPage, *, next_cursor: str | None) -> dict:
    data = {"workflow_id": result.instance.id, "revision": str(result.instance.revision)}
    return paged(data, items=[event_item(e) for e in result.page.items], next_cursor=next_cursor)
