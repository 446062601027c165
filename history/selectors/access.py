"""Visibility: whether a caller may see an instance, and the parent checks every history read starts with.

An identity (an API credential or an admin operator) sees an instance of its own namespace whose
fixed definition names only queues the identity may access. Another namespace, a missing row and
an inaccessible queue all answer the same NOT_FOUND, so knowing an id proves nothing. The API's
reads and commands, recovery and the admin all ask here.
"""

from django.db.models import Exists, OuterRef, QuerySet, Subquery

from core.errors import NotFound, Unavailable
from core.identity import Identity
from core.ids import ROOT_STEP_KEY
from core.read_once import ReadOnce
from history import models
from history.models import Activation, Gate, Namespace, Queue, Step, Task, WorkflowDefinition, WorkflowInstance
from history.prepared import Prepared

INSTANCE_NOT_FOUND = "workflow not found"
_DEFINITION_BROKEN = "the workflow's definition is missing or belongs to another namespace"


def instance_get_readable(*, identity: Identity, instance_id: str) -> WorkflowInstance:
    """The instance, with its fixed definition, if the identity may see it.

    One query reads the instance, its namespace's name (``namespace_name``, None when missing) and whether its
    gate exists (``has_gate``); the readers check the last two where they need them. The definition is the one
    this process keeps (``definitions_kept``).
    """
    instance = _instance_with_definition(namespace_id=identity.namespace_id, instance_id=instance_id)
    if instance is None:
        raise NotFound(INSTANCE_NOT_FOUND)
    _definition_check(identity=identity, instance=instance, definition=instance.definition)
    return instance


# A definition is immutable once created (its admin is read-only, nothing updates it), and every read of an
# instance and every record the engine handles names one: each process keeps the ones it read, by id, bounded.
definitions_kept: ReadOnce[str, WorkflowDefinition] = ReadOnce(
    lambda pk: WorkflowDefinition.objects.filter(pk=pk).first()
)


def _instance_with_definition(*, namespace_id: str, instance_id: str) -> WorkflowInstance | None:
    """The instance of the namespace (None when there is none) with ``namespace_name`` and ``has_gate``, in one
    query, and its definition as this process keeps it: UNAVAILABLE when that is missing or of another namespace."""
    instance = _instance_read.first(instance_id, namespace_id)
    if instance is not None:
        definition = definitions_kept(instance.definition_id)
        if definition is None or definition.namespace_id != instance.namespace_id:
            raise Unavailable(_DEFINITION_BROKEN)
        instance.definition = definition
    return instance


_instance_read = Prepared(
    lambda instance_id, namespace_id: (
        WorkflowInstance.objects.annotate(
            namespace_name=Subquery(Namespace.objects.filter(pk=OuterRef("namespace_id")).values("name")[:1]),
            has_gate=Exists(Gate.objects.filter(pk=OuterRef("pk"))),
        )
        .filter(id=instance_id, namespace_id=namespace_id)
        .order_by("pk")[:1]
    )
)
_step_of_key = Prepared(lambda instance_id, key: Step.objects.filter(instance_id=instance_id, key=key)[:1])


def task_workable(*, identity: Identity, task: Task | None) -> bool:
    """A worker sees a task of its namespace on a queue it may access, whatever else the definition names.

    ``task`` is read with ``queue_name`` (``tasks_with_queue_name``).
    """
    return (
        task is not None
        and task.namespace_id == identity.namespace_id
        and task.queue_name is not None
        and identity.can_access_queues([task.queue_name])
    )


def tasks_with_queue_name() -> QuerySet[Task]:
    """Tasks, each with ``queue_name``: the name of its queue row in its own namespace, None when there is none."""
    queue = Queue.objects.filter(pk=OuterRef("queue_id"), namespace_id=OuterRef("namespace_id")).values("name")[:1]
    return Task.objects.annotate(queue_name=Subquery(queue))


def instance_get_sourcing(*, task: Task) -> WorkflowInstance:
    """The instance a task names as its source, read as ``instance_get_readable`` reads it, for a caller that
    already may see the task: a task names an instance of its own namespace with an intact definition, so any
    other answer is corruption (UNAVAILABLE), never NOT_FOUND."""
    instance = _instance_with_definition(namespace_id=task.namespace_id, instance_id=task.source_instance_id)
    if instance is None:
        raise Unavailable(f"task {task.id} names no workflow in its namespace")
    return instance


def instance_definition_visible(*, identity: Identity, instance: WorkflowInstance | None) -> WorkflowDefinition:
    """The fixed definition of an instance row read by the caller (locked, for a commit), if the identity may see it."""
    if instance is None or instance.namespace_id != identity.namespace_id:
        raise NotFound(INSTANCE_NOT_FOUND)
    definition = WorkflowDefinition.objects.filter(pk=instance.definition_id).first()
    return definition_of_visible(identity=identity, instance=instance, definition=definition)


def definition_of_visible(
    *, identity: Identity, instance: WorkflowInstance, definition: WorkflowDefinition | None
) -> WorkflowDefinition:
    """``instance_definition_visible`` for an instance and its definition (None when missing) the caller read."""
    if instance.namespace_id != identity.namespace_id:
        raise NotFound(INSTANCE_NOT_FOUND)
    _definition_check(identity=identity, instance=instance, definition=definition)
    return definition


def _definition_check(*, identity: Identity, instance: WorkflowInstance, definition: WorkflowDefinition | None) -> None:
    """An instance of the identity's namespace: its definition must be intact, then every queue of it accessible."""
    if definition is None or definition.namespace_id != instance.namespace_id:
        raise Unavailable(_DEFINITION_BROKEN)
    if not definition_visible(identity=identity, definition=definition):
        raise NotFound(INSTANCE_NOT_FOUND)


def definition_visible(*, identity: Identity, definition: WorkflowDefinition) -> bool:
    """The instances of an intact definition of the identity's namespace are visible when every queue it names is."""
    return identity.can_access_queues(definition.queues)


# ---- the same rule over whole tables (the admin's lists) ---------------------------------

# How each table reaches the instance it belongs to.
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
    models.Proposal: "workflow",
    models.Decision: "workflow",
    models.Stall: "instance",
}
# Task rows and their children: the task's own namespace and queue, and only when its instance is
# visible too.
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


def _own_namespace(model, path: str) -> bool:
    """Whether a row's own namespace column stands for its instance's (or task's): it has one and always names
    its parent (a row naming none, such as a receipt of a command on no workflow, stays unseen)."""
    own = any(field.name == "namespace" for field in model._meta.fields)
    return own and not model._meta.get_field(path).null


def _parent_visible(queryset: QuerySet, path: str, identity: Identity) -> QuerySet:
    """The rows whose parent along ``path`` (their instance or task) the identity may see, the parent read by its
    key for each row. Not a join: with one, MariaDB drove a list's newest 50 from the parent table, reading a
    namespace's 250 000 instances and sorting their rows (48 s for a page of steps at 1M); a correlated lookup
    leaves the list's own index to set the order and stop at the page's end."""
    field = queryset.model._meta.get_field(path)
    parents = visible_rows(field.related_model.objects.all(), identity)
    return queryset.filter(**{field.attname: Subquery(parents.filter(pk=OuterRef(field.attname)).values("pk")[:1])})


def visible_rows(queryset: QuerySet, identity: Identity | None) -> QuerySet:
    """The rows of ``queryset`` the identity may see: its namespace, and what hangs off visible instances."""
    if identity is None:
        return queryset.none()
    model = queryset.model
    path = INSTANCE_PATH.get(model, TASK_PATH.get(model))
    if path:
        if _own_namespace(model, path):
            # A row's own namespace (written with its instance's): the index of a list of audits leads with it.
            queryset = queryset.filter(namespace_id=identity.namespace_id)
            if identity.queues is None:
                # Every queue, so every definition of the namespace: no instance to read.
                return queryset
        return _parent_visible(queryset, path, identity)
    if model is models.WorkflowInstance:
        if identity.queues is None:
            # No IN list of definitions to steer the planner off the index of a list's order.
            return queryset.filter(namespace_id=identity.namespace_id)
        return queryset.filter(namespace_id=identity.namespace_id, definition_id__in=visible_definition_ids(identity))
    if model is models.Task:
        queryset = queryset.filter(namespace_id=identity.namespace_id)
        if identity.queues is None:
            return queryset
        return queryset.filter(
            queue_id__in=visible_queue_ids(identity),
            source_instance__definition_id__in=visible_definition_ids(identity),
        )
    if model is models.Namespace:
        return queryset.filter(id=identity.namespace_id)
    if model is models.Queue:
        queryset = queryset.filter(namespace_id=identity.namespace_id)
        return queryset if identity.queues is None else queryset.filter(name__in=identity.queues)
    if model is models.WorkflowDefinition:
        return queryset.filter(id__in=visible_definition_ids(identity))
    if model is models.FailureSignature:
        queryset = queryset.filter(namespace_id=identity.namespace_id)
        if identity.queues is None:
            return queryset
        return queryset.filter(definition_id__in=visible_definition_ids(identity))
    if model is models.WebhookDelivery:
        # A body names instances of any queue: only an identity of every queue reads the log.
        if identity.queues is not None:
            return queryset.none()
        return queryset.filter(webhook__namespace_id=identity.namespace_id)
    if hasattr(model, "namespace_id") or any(f.name == "namespace" for f in model._meta.fields):
        return queryset.filter(namespace_id=identity.namespace_id)
    return queryset.none()


# ---- children of a visible instance ----------------------------------------------------


def step_spec_of(*, instance: WorkflowInstance, key: str) -> dict:
    """The spec of step ``key`` in the instance's fixed definition (``$root`` is never one)."""
    spec = instance.definition.step_spec(key) if key != ROOT_STEP_KEY else None
    if spec is None:
        raise NotFound(f"step {key!r} is not a step of this workflow's definition")
    return spec


def step_get_by_key(*, instance: WorkflowInstance, key: str) -> Step:
    """The logical step ``key`` of the instance's fixed definition."""
    spec = step_spec_of(instance=instance, key=key)
    step = _step_of_key.first(instance.id, key)
    return step_check(instance=instance, spec=spec, key=key, step=step)


def step_check(*, instance: WorkflowInstance, spec: dict, key: str, step: Step | None) -> Step:
    """The step row read for ``key`` must exist with the kind its spec names."""
    if step is None or step.kind != spec["kind"]:
        raise Unavailable(f"step {key!r} has no row matching the definition")
    step.instance = instance
    return step


def activation_get_under_step(
    *, instance: WorkflowInstance, key: str, activation_id: str, queryset: QuerySet[Activation] | None = None
) -> Activation:
    """Activation ``activation_id`` of the logical step ``key``, read with its step in one query.

    The checks and their order are those of ``step_get_by_key`` then the activation by (step, id):
    the step 404 (definition), the step 503 (row), then the activation 404.
    """
    spec = step_spec_of(instance=instance, key=key)
    activation = (
        (Activation.objects.all() if queryset is None else queryset)
        .select_related("step")
        .filter(id=activation_id, step__instance_id=instance.id, step__key=key)
        .first()
    )
    if activation is None:
        step_get_by_key(instance=instance, key=key)
        raise NotFound("activation not found under this step")
    activation.step = step_check(instance=instance, spec=spec, key=key, step=activation.step)
    return activation


def fixed_queue(*, instance: WorkflowInstance, spec: dict) -> QuerySet:
    """The queue the fixed definition names for a TASK or POLL step (one row at most: names are unique)."""
    return Queue.objects.filter(namespace_id=instance.namespace_id, name=spec.get("queue")).values_list("id", flat=True)


def fixed_queue_check(*, key: str, queue_id: str | None) -> str:
    if queue_id is None:
        raise Unavailable(f"the queue of step {key!r} does not exist in this namespace")
    return queue_id
