"""A task belongs to its step both ways: the same rule on loaded rows and in SQL."""

from history.models import Activation, PollRound, Task
from history.ownership import round_naming, task_named_back, task_points_back, tasks_owned_by_step
from tests.factories import activate, poll_round, step_of


def _named(activation: Activation, task: Task) -> bool:
    naming = round_naming(activation_id=activation.id, task_id=task.id, source_round=task.source_round)
    return task_named_back(
        kind=activation.step.kind,
        activation_task_id=activation.task_id,
        task_id=task.id,
        round_names_task=PollRound.objects.filter(naming).exists(),
    )


def test_a_task_and_a_query_task_are_owned_by_their_steps_on_rows_and_in_sql(workflow):
    charge = activate(step_of(workflow, "charge"))
    settle = activate(step_of(workflow, "settle"))
    query = poll_round(settle, 1).task
    for activation, task in ((charge, charge.task), (settle, query)):
        assert task_points_back(instance=workflow, activation=activation, task=task)
        assert _named(activation, task)
        owned = Task.objects.filter(tasks_owned_by_step(instance=workflow, step=activation.step))
        assert list(owned.values_list("pk", flat=True)) == [task.pk]


def test_a_task_its_source_does_not_name_back_is_not_owned(workflow):
    settle = activate(step_of(workflow, "settle"))
    query = poll_round(settle, 1).task
    Task.objects.filter(pk=query.pk).update(source_round=2)
    query.refresh_from_db()
    assert task_points_back(instance=workflow, activation=settle, task=query)
    assert not _named(settle, query)
    assert not Task.objects.filter(tasks_owned_by_step(instance=workflow, step=settle.step)).exists()
    charge = activate(step_of(workflow, "charge"))
    Activation.objects.filter(pk=charge.pk).update(task=None)
    charge.refresh_from_db()
    assert not _named(charge, Task.objects.get(source_activation=charge))
