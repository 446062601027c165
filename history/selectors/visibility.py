"""What an operator may see in the admin: the namespace and queue scoping of every table."""

from django.db.models import Q, QuerySet

from core.identity import Identity
from history import models

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
# Task rows and their children: the task's own namespace and queue, and (like the API) only when its
# instance is visible, i.e. every queue of the instance's definition is accessible.
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
        if identity.queues is None:
            return queryset
        return queryset.filter(
            **{
                f"{prefix}queue_id__in": visible_queue_ids(identity),
                f"{prefix}source_instance__definition_id__in": visible_definition_ids(identity),
            }
        )
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
