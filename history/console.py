"""Read side of the admin console: what an operator may see, and the instance page's data.

Every query here is bounded by one instance's history (steps, activations, tasks of that
instance), never by the size of the tables.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Model, Q, QuerySet

from history import models
from history.identity import Identity
from history.ids import ROOT_STEP_KEY

# How each table reaches the instance it belongs to (for namespace + queue scoping).
INSTANCE_PATH = {
    models.WorkflowInstance: "",
    models.Gate: "instance",
    models.Step: "instance",
    models.Activation: "instance",
    models.InboxRecord: "instance",
    models.PollRound: "instance",
    models.Wait: "instance",
    models.Signal: "workflow",
    models.SignalOperation: "workflow",
    models.WorkflowOperation: "workflow",
    models.Continuation: "instance",
    models.IdempotencyReceipt: "workflow",
}
# Task rows and their children are scoped by the task's own namespace and fixed queue.
TASK_PATH = {models.Task: "", models.Attempt: "task", models.ResultEvent: "task", models.ExecutionAudit: "task"}


def visible_queue_ids(identity: Identity) -> list[str] | None:
    """Ids of the queues the identity may access; None for every queue of its namespace."""
    if identity.queues is None:
        return None
    return list(
        models.Queue.objects.filter(namespace_id=identity.namespace_id, name__in=identity.queues).values_list(
            "id", flat=True
        )
    )


def visible_definition_ids(identity: Identity) -> list[str]:
    """Definitions of the identity's namespace whose every queue the identity may access."""
    rows = models.WorkflowDefinition.objects.filter(namespace_id=identity.namespace_id).values_list("id", "queues")
    return [pk for pk, queues in rows if identity.can_access_queues(queues)]


def visible_rows(queryset: QuerySet, identity: Identity | None) -> QuerySet:
    """Restrict an admin queryset to the identity's namespace and accessible queues."""
    if identity is None:
        return queryset.none()
    model = queryset.model
    if model in INSTANCE_PATH:
        path = INSTANCE_PATH[model]
        prefix = f"{path}__" if path else ""
        instances = Q(**{f"{prefix}namespace_id": identity.namespace_id}) & Q(
            **{f"{prefix}definition_id__in": visible_definition_ids(identity)}
        )
        return queryset.filter(instances)
    if model in TASK_PATH:
        prefix = f"{TASK_PATH[model]}__" if TASK_PATH[model] else ""
        queryset = queryset.filter(**{f"{prefix}namespace_id": identity.namespace_id})
        queue_ids = visible_queue_ids(identity)
        return queryset if queue_ids is None else queryset.filter(**{f"{prefix}queue_id__in": queue_ids})
    if model is models.Namespace:
        return queryset.filter(id=identity.namespace_id)
    if model is models.Queue:
        queryset = queryset.filter(namespace_id=identity.namespace_id)
        return queryset if identity.queues is None else queryset.filter(name__in=identity.queues)
    if model is models.WorkflowDefinition:
        return queryset.filter(id__in=visible_definition_ids(identity))
    if hasattr(model, "namespace_id") or any(f.name == "namespace" for f in model._meta.fields):
        return queryset.filter(namespace_id=identity.namespace_id)
    return queryset.none()


@dataclass
class ActivationView:
    activation: models.Activation
    task: models.Task | None = None
    tasks: list[models.Task] = field(default_factory=list)
    attempts: dict[str, list[models.Attempt]] = field(default_factory=dict)
    rounds: list[models.PollRound] = field(default_factory=list)
    wait: models.Wait | None = None


@dataclass
class StepView:
    step: models.Step
    spec: dict
    activations: list[ActivationView]


@dataclass
class InstancePage:
    instance: models.WorkflowInstance
    gate: models.Gate | None
    steps: list[StepView]
    inbox: list[models.InboxRecord]
    signals: list[models.Signal]
    workflow_operations: list[models.WorkflowOperation]
    execution_audits: list[models.ExecutionAudit]


def _by(rows: list[Model], attribute: str) -> dict[str, list[Model]]:
    grouped: dict[str, list[Model]] = defaultdict(list)
    for row in rows:
        grouped[getattr(row, attribute)].append(row)
    return grouped


def instance_page(*, instance: models.WorkflowInstance, with_audit: bool, recent: int = 50) -> InstancePage:
    """Everything the instance page shows, in a fixed number of queries."""
    definition = instance.definition
    specs = {step["key"]: step for step in definition.spec.get("steps", [])}
    steps = list(models.Step.objects.filter(instance_id=instance.id).exclude(key=ROOT_STEP_KEY).order_by("key"))
    activations = list(models.Activation.objects.filter(instance_id=instance.id).order_by("step_id", "-sequence"))
    tasks = list(models.Task.objects.filter(source_instance_id=instance.id).order_by("created_at", "id"))
    attempts = _by(
        list(models.Attempt.objects.filter(task__source_instance_id=instance.id).order_by("number")), "task_id"
    )
    rounds = _by(list(models.PollRound.objects.filter(instance_id=instance.id).order_by("-round")), "activation_id")
    waits = {w.id: w for w in models.Wait.objects.filter(instance_id=instance.id)}
    tasks_by_activation = _by(tasks, "source_activation_id")
    task_by_id = {t.id: t for t in tasks}

    views_by_step: dict[str, list[ActivationView]] = defaultdict(list)
    for activation in activations:
        own_tasks = tasks_by_activation.get(activation.id, [])
        views_by_step[activation.step_id].append(
            ActivationView(
                activation=activation,
                task=task_by_id.get(activation.task_id),
                tasks=own_tasks,
                attempts={t.id: attempts.get(t.id, []) for t in own_tasks},
                rounds=rounds.get(activation.id, []),
                wait=waits.get(activation.wait_id),
            )
        )
    order = {key: index for index, key in enumerate(specs)}
    step_views = sorted(
        (StepView(step=s, spec=specs.get(s.key, {}), activations=views_by_step.get(s.id, [])) for s in steps),
        key=lambda view: order.get(view.step.key, len(order)),
    )
    inbox = list(models.InboxRecord.objects.filter(instance_id=instance.id).order_by("-created_at", "-id")[:recent])
    signals = list(models.Signal.objects.filter(workflow_id=instance.id).order_by("-accepted_at", "-id")[:recent])
    operations: list[models.WorkflowOperation] = []
    executions: list[models.ExecutionAudit] = []
    if with_audit:
        operations = list(
            models.WorkflowOperation.objects.filter(workflow_id=instance.id).order_by("-created_at", "-id")[:recent]
        )
        executions = list(
            models.ExecutionAudit.objects.filter(task_id__in=list(task_by_id)).order_by("-created_at", "-id")[:recent]
        )
    return InstancePage(
        instance=instance,
        gate=models.Gate.objects.filter(instance_id=instance.id).first(),
        steps=step_views,
        inbox=inbox,
        signals=signals,
        workflow_operations=operations,
        execution_audits=executions,
    )
