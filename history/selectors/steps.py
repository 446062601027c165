"""The logical step's current view: the step, its current activation and that activation's task."""

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import Unavailable
from history.models import Activation, Step, StepKind, Task, WorkflowInstance
from history.ownership import task_points_back


@dataclass(frozen=True)
class CurrentStep:
    """A step as the read API shows it: the step, its current activation and that activation's task."""

    step: Step
    current_activation: Activation | None
    # TASK: the activation's task; POLL: the query task of its last round.
    task: Task | None


def current_task_id(*, step: Step, activation: Activation) -> str | None:
    if step.kind == StepKind.TASK:
        return activation.task_id
    if step.kind == StepKind.POLL:
        return activation.last_task_id
    return None


def check_activation_of(*, step: Step, activation: Activation) -> None:
    """An activation read under a step must belong to that step and its instance."""
    if activation.step_id != step.id or activation.instance_id != step.instance_id:
        raise Unavailable(f"activation {activation.id} does not belong to step {step.key!r} of this workflow")


def step_views(
    *, instance: WorkflowInstance, steps: Iterable[Step], loaded: Iterable[Activation] = ()
) -> list[CurrentStep]:
    """The current view of each step, in two queries whatever the history size.

    ``loaded`` are activations the caller already read (they are not read again).
    """
    steps = list(steps)
    activations = {activation.id: activation for activation in loaded}
    wanted = {s.current_activation_id for s in steps if s.current_activation_id} - activations.keys()
    if wanted:
        activations.update((a.id, a) for a in Activation.objects.filter(id__in=wanted))
    current: dict[str, Activation] = {}
    for step in steps:
        if step.current_activation_id is None:
            continue
        activation = activations.get(step.current_activation_id)
        if activation is None:
            raise Unavailable(f"the current activation of step {step.key!r} does not exist")
        check_activation_of(step=step, activation=activation)
        current[step.id] = activation
    task_ids = {current_task_id(step=s, activation=current[s.id]) for s in steps if s.id in current} - {None}
    tasks = {task.id: task for task in Task.objects.filter(id__in=task_ids)} if task_ids else {}
    views = []
    for step in steps:
        activation = current.get(step.id)
        task_id = current_task_id(step=step, activation=activation) if activation else None
        task = tasks.get(task_id) if task_id else None
        if task_id and task is None:
            raise Unavailable(f"the task of step {step.key!r}'s current activation does not exist")
        if task is not None:
            check_task_source(instance=instance, activation=activation, task=task)
        views.append(CurrentStep(step=step, current_activation=activation, task=task))
    return views


def check_task_source(*, instance: WorkflowInstance, activation: Activation, task: Task) -> None:
    """A task read through an activation must name that activation, instance and namespace back."""
    if not task_points_back(instance=instance, activation=activation, task=task):
        raise Unavailable(f"task {task.id} does not point back to activation {activation.id} of this workflow")
