"""The admin's instance page: one instance's steps, activations, tasks, rounds, signals, audit and timeline.

What an operator may see is decided by the API's rule, in ``history.selectors.access``. Every
query here is bounded by one instance's history (steps, activations, tasks of that instance),
never by the size of the tables.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Model

from core.ids import ROOT_STEP_KEY
from history import models
from history.selectors.events import EventFilters, event_page
from history.selectors.pagination import Page


@dataclass
class ActivationView:
    activation: models.Activation
    tasks: list[models.Task] = field(default_factory=list)
    attempts: dict[str, list[models.Attempt]] = field(default_factory=dict)
    rounds: list[models.PollRound] = field(default_factory=list)
    wait: models.Wait | None = None


@dataclass
class StepActivations:
    """A step with the activations the admin page shows of it, each with its tasks, rounds and wait."""

    step: models.Step
    activations: list[ActivationView]


@dataclass
class InstancePage:
    instance: models.WorkflowInstance
    gate: models.Gate | None
    steps: list[StepActivations]
    inbox: list[models.InboxRecord]
    signals: list[models.Signal]
    workflow_operations: list[models.WorkflowOperation]
    execution_audits: list[models.ExecutionAudit]
    # One keyset page of the timeline, in the order and with the filters asked for.
    events: Page[models.InstanceEvent]


def _by(rows: list[Model], attribute: str) -> dict[str, list[Model]]:
    grouped: dict[str, list[Model]] = defaultdict(list)
    for row in rows:
        grouped[getattr(row, attribute)].append(row)
    return grouped


# The instance page shows the newest activations of each step and the newest rounds of each
# POLL activation; the full history is one click away in the paged lists.
TIMELINE = 10
EVENTS_PER_PAGE = 25
NEWEST_FIRST = EventFilters(descending=True)


def instance_page(
    *,
    instance: models.WorkflowInstance,
    with_audit: bool,
    recent: int = 50,
    events: EventFilters = NEWEST_FIRST,
    events_before: int | None = None,
) -> InstancePage:
    """Everything the instance page shows; the query count is bounded by the definition, not the history.

    The timeline page holds the events before the sequence ``events_before`` (from the newest when None)."""
    specs = {step["key"]: step for step in instance.definition.spec.get("steps", [])}
    steps = list(models.Step.objects.filter(instance_id=instance.id).exclude(key=ROOT_STEP_KEY))
    shown: list[models.Activation] = []
    for step in steps:
        shown += models.Activation.objects.filter(step_id=step.id).order_by("-sequence")[:TIMELINE]
    rounds = {
        a.id: list(models.PollRound.objects.filter(activation_id=a.id).order_by("-round", "-id")[:TIMELINE])
        for a in shown
        if a.first_round is not None
    }
    task_ids = {a.task_id for a in shown} | {r.task_id for rs in rounds.values() for r in rs}
    task_ids.discard(None)
    task_by_id = {t.id: t for t in models.Task.objects.filter(id__in=task_ids)}
    attempts = _by(list(models.Attempt.objects.filter(task_id__in=task_ids).order_by("number")), "task_id")
    waits = {w.id: w for w in models.Wait.objects.filter(id__in=[a.wait_id for a in shown if a.wait_id])}

    views_by_step: dict[str, list[ActivationView]] = defaultdict(list)
    for activation in shown:
        own_rounds = rounds.get(activation.id, [])
        own_ids = [r.task_id for r in own_rounds] if activation.first_round is not None else [activation.task_id]
        own_tasks = [task_by_id[t] for t in own_ids if t in task_by_id]
        views_by_step[activation.step_id].append(
            ActivationView(
                activation=activation,
                tasks=own_tasks,
                attempts={t.id: attempts.get(t.id, []) for t in own_tasks},
                rounds=own_rounds,
                wait=waits.get(activation.wait_id),
            )
        )
    order = {key: index for index, key in enumerate(specs)}
    step_rows = sorted(
        (StepActivations(step=s, activations=views_by_step.get(s.id, [])) for s in steps),
        key=lambda view: (order.get(view.step.key, len(order)), view.step.key),
    )
    inbox = list(models.InboxRecord.objects.filter(instance_id=instance.id).order_by("-created_at", "-id")[:recent])
    signals = list(models.Signal.objects.filter(workflow_id=instance.id).order_by("-accepted_at", "-id")[:recent])
    operations: list[models.WorkflowOperation] = []
    executions: list[models.ExecutionAudit] = []
    if with_audit:
        operations = list(
            # The namespace leads the audit's (namespace, workflow, created_at, id) index.
            models.WorkflowOperation.objects.filter(
                namespace_id=instance.namespace_id, workflow_id=instance.id
            ).order_by("-created_at", "-id")[:recent]
        )
        # Task reviews of this instance are the execution audits its workflow audit references.
        reviewed = [op.execution_audit_id for op in operations if op.execution_audit_id]
        executions = list(models.ExecutionAudit.objects.filter(id__in=reviewed).order_by("-created_at", "-id"))
    return InstancePage(
        instance=instance,
        gate=models.Gate.objects.filter(instance_id=instance.id).first(),
        steps=step_rows,
        inbox=inbox,
        signals=signals,
        workflow_operations=operations,
        execution_audits=executions,
        events=event_page(
            instance=instance,
            filters=events,
            after=None if events_before is None else (events_before,),
            limit=EVENTS_PER_PAGE,
        ),
    )
