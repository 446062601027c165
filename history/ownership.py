"""Who owns a task: the one rule every read and check of a task's place applies, on loaded rows or in SQL.

A task belongs to the activation that sourced it when both directions hold: the task points to the
activation, its instance and the instance's namespace; and the activation names it back (a TASK
activation by its task_id, a POLL activation by a poll round of the task's source round). The
activation belongs to a step of the same instance, and the task runs on that step's fixed queue.
A row breaking this is corruption, never something a caller may not see.
"""

from django.db.models import Exists, F, OuterRef, Q

from history.models import Activation, PollRound, Step, StepKind, Task, WorkflowInstance


def task_points_back(*, instance: WorkflowInstance, activation: Activation, task: Task) -> bool:
    """The task names this activation, its instance and the instance's namespace as its source."""
    return (
        task.namespace_id == instance.namespace_id
        and task.source_instance_id == instance.id
        and task.source_activation_id == activation.id
    )


def task_named_back(*, kind: str, activation_task_id: str | None, task_id: str, round_names_task: bool) -> bool:
    """The activation of a ``kind`` step names the task back: a TASK activation by its task_id; a POLL
    activation when ``round_names_task``, one of its poll rounds naming the task for its source round
    (``round_naming``)."""
    if kind == StepKind.TASK:
        return activation_task_id == task_id
    return kind == StepKind.POLL and round_names_task


def round_naming(*, activation_id, task_id, source_round) -> Q:
    """The poll rounds that name a task for its source round under an activation (values or OuterRefs)."""
    return Q(activation_id=activation_id, task_id=task_id, round=source_round)


def tasks_owned_by_step(*, instance: WorkflowInstance, step: Step) -> Q:
    """The same rule in SQL over Task rows: sourced by an activation of the step, in its instance and
    namespace, and named back. A POLL task not yet given a round (no source round, named by none) counts
    as owned; a task of a step of another kind only without a source round."""
    owned = Q(source_activation__step_id=step.id, source_instance_id=instance.id, namespace_id=instance.namespace_id)
    if step.kind == StepKind.TASK:
        return owned & Q(source_activation__task_id=F("pk"))
    named = PollRound.objects.filter(activation_id=OuterRef("source_activation_id"), task_id=OuterRef("pk"))
    if step.kind == StepKind.POLL:
        for_round = round_naming(
            activation_id=OuterRef("source_activation_id"),
            task_id=OuterRef("pk"),
            source_round=OuterRef("source_round"),
        )
        return owned & (Exists(PollRound.objects.filter(for_round)) | Q(source_round__isnull=True) & ~Exists(named))
    return owned & Q(source_round__isnull=True)
