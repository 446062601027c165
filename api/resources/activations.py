"""Steps, their activations, a POLL activation's business rounds and a step's wait (history reads)."""

from rest_framework import serializers

from api.resources import optional, optional_raw, optional_time, paged
from api.schema import ExactJSONField, IdField, RevisionField, TimeField, u32
from core.exactjson import Raw
from core.times import format_time
from history.models import Activation, PollRound, StepKind, Task, Wait
from history.selectors import activations as activation_reads
from history.selectors.steps import CurrentStep


class TaskSummary(serializers.Serializer):
    id = IdField()
    state = serializers.CharField()
    revision = RevisionField()
    attempt_count = u32()
    max_attempts = u32()


def task_summary(task: Task) -> dict:
    return {
        "id": task.id,
        "state": task.state,
        "revision": str(task.revision),
        "attempt_count": task.attempt_count,
        "max_attempts": task.max_attempts,
    }


class ActivationItem(serializers.Serializer):
    id = IdField()
    step_id = IdField()
    sequence = u32()
    state = serializers.CharField()
    revision = RevisionField()
    task_id = IdField(required=False, help_text="TASK activations only")
    created_at = TimeField()
    updated_at = TimeField()
    completed_at = TimeField(required=False)


def activation_item(activation: Activation, *, kind: str) -> dict:
    data = {
        "id": activation.id,
        "step_id": activation.step_id,
        "sequence": activation.sequence,
        "state": activation.state,
        "revision": str(activation.revision),
    }
    if kind == StepKind.TASK:
        optional(data, "task_id", activation.task_id)
    data["created_at"] = format_time(activation.created_at)
    data["updated_at"] = format_time(activation.updated_at)
    optional_time(data, "completed_at", activation.completed_at)
    return data


class CurrentActivation(ActivationItem):
    task = TaskSummary(required=False, help_text="TASK: its task; POLL: the query task of the last round")


class StepView(serializers.Serializer):
    id = IdField()
    key = serializers.CharField()
    kind = serializers.CharField()
    state = serializers.CharField()
    revision = RevisionField()
    current_activation_id = IdField(required=False)
    resolution = serializers.JSONField(required=False)
    current_activation = CurrentActivation(required=False)


def step_view(view: CurrentStep) -> dict:
    step = view.step
    data = {"id": step.id, "key": step.key, "kind": step.kind, "state": step.state, "revision": str(step.revision)}
    optional(data, "current_activation_id", step.current_activation_id)
    optional(data, "resolution", step.resolution)
    if view.current_activation is not None:
        current = activation_item(view.current_activation, kind=step.kind)
        if view.task is not None:
            current["task"] = task_summary(view.task)
        data["current_activation"] = current
    return data


class ActivationPage(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField(help_text="the instance revision when this page was read")
    step_id = IdField()
    current_activation_id = IdField(required=False)
    items = ActivationItem(many=True)
    next_cursor = serializers.CharField(required=False)


def activation_page(result: activation_reads.ActivationPage, *, next_cursor: str | None) -> dict:
    data = {"instance_id": result.instance.id, "revision": str(result.instance.revision), "step_id": result.step.id}
    optional(data, "current_activation_id", result.step.current_activation_id)
    items = [activation_item(a, kind=result.step.kind) for a in result.page.items]
    return paged(data, items=items, next_cursor=next_cursor)


class PollSection(serializers.Serializer):
    first_round = u32()
    first_round_attempts_used = u32()
    used_rounds = u32()
    max_rounds = u32()
    attempts_per_round = u32()
    interval_seconds = u32()
    poll_deadline_at = TimeField()
    round_deadline_at = TimeField()
    last_task_id = IdField(required=False)
    next_round_at = TimeField(required=False)
    last_round_classification = serializers.CharField(required=False)


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
    optional(data, "last_task_id", activation.last_task_id)
    optional_time(data, "next_round_at", activation.next_round_at)
    optional(data, "last_round_classification", activation.last_round_classification)
    return data


class WaitSection(serializers.Serializer):
    id = IdField()
    kind = serializers.CharField()
    generation = u32()
    state = serializers.CharField()
    deadline_at = TimeField()
    fire_at = TimeField(required=False)
    winner_signal_id = IdField(required=False)


def wait_section(wait: Wait) -> dict:
    data = {
        "id": wait.id,
        "kind": wait.kind,
        "generation": wait.generation,
        "state": wait.state,
        "deadline_at": format_time(wait.deadline_at),
    }
    optional_time(data, "fire_at", wait.fire_at)
    optional(data, "winner_signal_id", wait.winner_signal_id)
    return data


class ActivationDetail(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    step = StepView(help_text="the logical step's current view")
    activation = ActivationItem(help_text="the requested activation")
    input = ExactJSONField()
    output = ExactJSONField(required=False, help_text="absent when there is none; null when explicitly null")
    poll = PollSection(required=False)
    wait = WaitSection(required=False)


def activation_detail(detail: activation_reads.ActivationDetail) -> dict:
    activation = detail.activation
    data = {
        "instance_id": detail.instance.id,
        "revision": str(detail.instance.revision),
        "step": step_view(detail.step),
        "activation": activation_item(activation, kind=detail.step.step.kind),
        "input": Raw(activation.input),
    }
    optional_raw(data, "output", activation.output)
    if detail.poll is not None:
        data["poll"] = poll_section(detail.poll)
    if detail.wait is not None:
        data["wait"] = wait_section(detail.wait)
    return data


class PollRoundItem(serializers.Serializer):
    id = IdField()
    activation_id = IdField()
    round = u32()
    task_id = IdField()
    created_at = TimeField()


def poll_round_item(poll_round: PollRound) -> dict:
    return {
        "id": poll_round.id,
        "activation_id": poll_round.activation_id,
        "round": poll_round.round,
        "task_id": poll_round.task_id,
        "created_at": format_time(poll_round.created_at),
    }


class PollRoundPage(serializers.Serializer):
    instance_id = IdField()
    revision = RevisionField()
    activation_id = IdField()
    items = PollRoundItem(many=True)
    next_cursor = serializers.CharField(required=False)


def poll_round_page(result: activation_reads.PollRoundPage, *, next_cursor: str | None) -> dict:
    data = {
        "instance_id": result.instance.id,
        "revision": str(result.instance.revision),
        "activation_id": result.activation.id,
    }
    return paged(data, items=[poll_round_item(r) for r in result.page.items], next_cursor=next_cursor)
