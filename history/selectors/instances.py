"""One workflow instance with its steps' current views, and one task's execution history."""

import datetime as dt
from dataclasses import dataclass

from core.errors import NotFound, Unavailable
from core.identity import Identity
from core.ids import ROOT_STEP_KEY
from history.models import Activation, Attempt, ResultEvent, Step, Task, WorkflowInstance
from history.selectors.access import instance_get_readable, tasks_with_queue_name
from history.selectors.steps import CurrentStep, step_views
from history.selectors.tasks import task_source_verified


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
    attempt_id: str | None


@dataclass(frozen=True)
class TaskDetail:
    instance: WorkflowInstance
    step: Step
    activation: Activation
    task: Task
    attempts: list[Attempt]
    # Every late result event of the task by seq; each attempt also carries the first one naming it.
    late_evidence: list[LateEvidence]


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
    """A task under its instance, with its source verified both ways, its attempts in order and its late evidence."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    task = tasks_with_queue_name().filter(id=task_id, source_instance_id=instance.id).first()
    if task is None:
        raise NotFound("task not found under this workflow")
    activation = task_source_verified(instance=instance, task=task)
    late = task_late_evidence(task.id)
    return TaskDetail(
        instance=instance,
        step=activation.step,
        activation=activation,
        task=task,
        attempts=task_attempts(task.id, late=late),
        late_evidence=late,
    )


def task_late_evidence(task_id: str) -> list[LateEvidence]:
    """Every late result event of the task, by seq."""
    rows = ResultEvent.objects.filter(task_id=task_id, late=True).order_by("seq")
    return [
        LateEvidence(
            event_id=event.id,
            seq=event.seq,
            outcome=event.outcome,
            result=event.result,
            recorded_at=event.created_at,
            attempt_id=event.attempt_id,
        )
        for event in rows
    ]


def task_attempts(task_id: str, *, late: list[LateEvidence] | None = None) -> list[Attempt]:
    """The task's attempts by number, each with ``late_evidence``: the first late event naming it, or None.

    ``late`` is the task's late evidence when the caller already read it.
    """
    first: dict[str | None, LateEvidence] = {}
    for evidence in task_late_evidence(task_id) if late is None else late:
        first.setdefault(evidence.attempt_id, evidence)
    attempts = list(Attempt.objects.filter(task_id=task_id).order_by("number"))
    for attempt in attempts:
        attempt.late_evidence = first.get(attempt.id)
    return attempts
