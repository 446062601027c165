"""One workflow instance with its steps' current views, and one task's execution history."""

import datetime as dt
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Subquery

from core.errors import NotFound, Unavailable
from core.identity import Identity
from core.ids import ROOT_STEP_KEY
from history.models import Activation, Attempt, PollRound, ResultEvent, Step, StepKind, Task, WorkflowInstance
from history.ownership import round_naming, task_named_back
from history.selectors.access import fixed_queue_id, instance_get_readable
from history.selectors.steps import CurrentStep, step_views


@dataclass(frozen=True)
class InstanceDetail:
    instance: WorkflowInstance
    namespace: str
    steps: list[CurrentStep]


@dataclass(frozen=True)
class LateEvidence:
    """A completion reported after its attempt's lease was lost: kept for the operator, applied to nothing."""

    event_id: str
    seq: int
    outcome: str
    result: str | None
    recorded_at: dt.datetime


@dataclass(frozen=True)
class TaskDetail:
    instance: WorkflowInstance
    step: Step
    activation: Activation
    task: Task
    attempts: list[Attempt]


def instance_get(*, identity: Identity, instance_id: str) -> InstanceDetail:
    """The instance and every logical step of its fixed definition, in definition order."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    namespace = instance.namespace_name
    if namespace is None:
        raise Unavailable("the workflow's namespace does not exist")
    rows = {step.key: step for step in Step.objects.filter(instance_id=instance.id).exclude(key=ROOT_STEP_KEY)}
    specs = instance.definition.spec["steps"]
    if rows.keys() != {spec["key"] for spec in specs}:
        raise Unavailable("the workflow's steps do not match its definition")
    steps = []
    for spec in specs:
        step = rows[spec["key"]]
        if step.kind != spec["kind"]:
            raise Unavailable(f"step {step.key!r} has another kind than in the definition")
        step.instance = instance
        steps.append(step)
    return InstanceDetail(instance=instance, namespace=namespace, steps=step_views(instance=instance, steps=steps))


def task_get(*, identity: Identity, instance_id: str, task_id: str) -> TaskDetail:
    """A task under its instance, with its source verified both ways and its attempts in order."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    task = Task.objects.filter(id=task_id, source_instance_id=instance.id).first()
    if task is None:
        raise NotFound("task not found under this workflow")
    # The source activation with its step, and (POLL) whether one of its rounds names this task back.
    round_names_task = PollRound.objects.filter(
        round_naming(activation_id=OuterRef("pk"), task_id=task.id, source_round=task.source_round)
    )
    activation = (
        Activation.objects.select_related("step")
        .annotate(round_names_task=Exists(round_names_task))
        .filter(id=task.source_activation_id)
        .first()
    )
    step = activation.step if activation is not None else None
    if (
        task.namespace_id != instance.namespace_id
        or activation is None
        or activation.instance_id != instance.id
        or step.instance_id != instance.id
        or step.kind not in (StepKind.TASK, StepKind.POLL)
    ):
        raise Unavailable(f"task {task.id} has no source activation of a TASK or POLL step of this workflow")
    if not task_named_back(
        kind=step.kind,
        activation_task_id=activation.task_id,
        task_id=task.id,
        round_names_task=activation.round_names_task,
    ):
        raise Unavailable(f"activation {activation.id} does not name task {task.id} back")
    if task.queue_id != fixed_queue_id(instance=instance, step=step):
        raise Unavailable(f"task {task.id} is not on the fixed queue of step {step.key!r}")
    return TaskDetail(instance=instance, step=step, activation=activation, task=task, attempts=task_attempts(task.id))


_LATE_FIELDS = {"id": "event_id", "seq": "seq", "outcome": "outcome", "result": "result", "created_at": "recorded_at"}


def task_attempts(task_id: str) -> list[Attempt]:
    """The task's attempts by number, each with ``late_evidence`` (a LateEvidence or None), in one query."""
    late = ResultEvent.objects.filter(task_id=task_id, attempt_id=OuterRef("pk"), late=True).order_by("seq")
    columns = {f"late_{name}": Subquery(late.values(column)[:1]) for column, name in _LATE_FIELDS.items()}
    attempts = list(Attempt.objects.filter(task_id=task_id).annotate(**columns).order_by("number"))
    for attempt in attempts:
        values = {name: getattr(attempt, f"late_{name}") for name in _LATE_FIELDS.values()}
        attempt.late_evidence = LateEvidence(**values) if values["event_id"] is not None else None
    return attempts
