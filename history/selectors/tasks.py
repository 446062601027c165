"""Where a task comes from: its source activation verified both ways, and the source read on its own."""

from dataclasses import dataclass

from django.db.models import OuterRef, Subquery

from core.errors import NotFound, Unavailable
from core.identity import Identity
from history.models import Activation, PollRound, Scope, Step, StepKind, Task, WorkflowInstance
from history.ownership import round_naming, task_named_back, task_points_back
from history.selectors.access import definition_visible, instance_get_sourcing, task_workable, tasks_with_queue_name

# One answer for a task that does not exist, is in another namespace, or that the caller may not see.
TASK_NOT_FOUND = "task not found"


@dataclass(frozen=True)
class TaskSource:
    namespace: str
    instance: WorkflowInstance
    step: Step
    activation: Activation
    task: Task
    # POLL query tasks: the round that names the task; None for a TASK step's task.
    poll_round_id: str | None


def task_source_verified(*, instance: WorkflowInstance, task: Task) -> Activation:
    """The activation that sourced ``task`` (read with its step), verified both ways; UNAVAILABLE otherwise.

    ``task`` is read with ``queue_name`` (``tasks_with_queue_name``). The task points to the activation, the
    instance and its namespace; the activation belongs to a TASK or POLL step of the instance and names the task
    back (a POLL activation by the poll round of the task's round, ``poll_round_id`` on the activation); the task
    runs on the queue the fixed definition names for the step.
    """
    naming = PollRound.objects.filter(
        round_naming(activation_id=OuterRef("pk"), task_id=task.id, source_round=task.source_round),
        instance_id=instance.id,
    )
    activation = (
        Activation.objects.select_related("step")
        .annotate(poll_round_id=Subquery(naming.values("id")[:1]))
        .filter(id=task.source_activation_id)
        .first()
    )
    if (
        activation is None
        or not task_points_back(instance=instance, activation=activation, task=task)
        or activation.instance_id != instance.id
        or activation.step.instance_id != instance.id
        or activation.step.kind not in (StepKind.TASK, StepKind.POLL)
    ):
        raise Unavailable(f"task {task.id} has no source activation of a TASK or POLL step of this workflow")
    step = activation.step
    if not task_named_back(
        kind=step.kind,
        activation_task_id=activation.task_id,
        task_id=task.id,
        round_names_task=activation.poll_round_id is not None,
    ):
        raise Unavailable(f"activation {activation.id} does not name task {task.id} back")
    if task.queue_name is None or task.queue_name != instance.definition.step_spec(step.key).get("queue"):
        raise Unavailable(f"task {task.id} is not on the fixed queue of step {step.key!r}")
    step.instance = instance
    return activation


def task_source_get(*, identity: Identity, task_id: str) -> TaskSource:
    """The instance, step, activation, poll round and queue a task belongs to, verified both ways.

    A workflows:read caller sees the task when it may see its instance; a tasks:work caller when it may work the
    task's queue. Anything else, like a missing task or one of another namespace, is the one NOT_FOUND; a source
    that does not agree with the task is UNAVAILABLE.
    """
    task = tasks_with_queue_name().filter(id=task_id, namespace_id=identity.namespace_id).first()
    workable = Scope.TASKS_WORK in identity.scopes and task_workable(identity=identity, task=task)
    if task is None or not (workable or Scope.READ in identity.scopes):
        raise NotFound(TASK_NOT_FOUND)
    instance = instance_get_sourcing(task=task)
    if not workable and not definition_visible(identity=identity, definition=instance.definition):
        raise NotFound(TASK_NOT_FOUND)
    if instance.namespace_name is None:
        raise Unavailable("the workflow's namespace does not exist")
    activation = task_source_verified(instance=instance, task=task)
    return TaskSource(
        namespace=instance.namespace_name,
        instance=instance,
        step=activation.step,
        activation=activation,
        task=task,
        poll_round_id=activation.poll_round_id,
    )
