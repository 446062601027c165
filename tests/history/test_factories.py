"""The factories build rows whose relations agree both ways, as the engine writes them."""

from core.ids import ROOT_STEP_KEY
from history.models import Gate, Step, WaitKind
from tests.factories import (
    AttemptFactory,
    ExecutionAuditFactory,
    InboxRecordFactory,
    accept_signal,
    activate,
    poll_round,
    step_of,
)


def test_an_instance_has_its_gate_and_one_step_per_node_plus_root(workflow):
    assert Gate.objects.get(instance=workflow).open is True
    keys = set(Step.objects.filter(instance=workflow).values_list("key", flat=True))
    assert keys == {ROOT_STEP_KEY, "charge", "settle", "approve", "cool-off"}
    assert workflow.definition.queues == ["payments"]


def test_a_task_activation_and_its_task_name_each_other_on_the_fixed_queue(workflow):
    activation = activate(step_of(workflow, "charge"))
    task = activation.task
    assert (task.source_activation_id, task.source_instance_id, task.namespace_id) == (
        activation.id,
        workflow.id,
        workflow.namespace_id,
    )
    assert (task.queue.name, task.queue.namespace_id, task.application.namespace_id) == (
        "payments",
        workflow.namespace_id,
        workflow.namespace_id,
    )
    assert step_of(workflow, "charge").current_activation_id == activation.id
    assert [AttemptFactory(task=task).number, AttemptFactory(task=task).number] == [1, 2]


def test_waits_rounds_signals_and_audits_agree_with_their_parents(workflow):
    signal_activation = activate(step_of(workflow, "approve"))
    assert (signal_activation.wait.activation_id, signal_activation.wait.kind) == (
        signal_activation.id,
        WaitKind.SIGNAL,
    )
    poll = activate(step_of(workflow, "settle"), wait={})
    assert poll.wait.kind == WaitKind.POLL_FINAL_SIGNAL and poll.task_id is None
    record = poll_round(poll, 3)
    assert (record.task.source_round, record.task.source_activation_id) == (3, poll.id)
    poll.refresh_from_db()
    assert (poll.last_task_id, poll.used_rounds) == (record.task_id, 3)
    signal, acceptance = accept_signal(workflow)
    assert (acceptance.workflow_id, acceptance.namespace_id, acceptance.before) == (
        workflow.id,
        workflow.namespace_id,
        None,
    )
    assert acceptance.after["signal_id"] == signal.id and acceptance.after["state"] == "PENDING"
    charge = activate(step_of(workflow, "charge"))
    audit = ExecutionAuditFactory(task=charge.task)
    inbox = InboxRecordFactory(event__task=charge.task)
    assert audit.namespace_id == workflow.namespace_id
    assert (inbox.instance_id, inbox.activation_id, inbox.task_id) == (workflow.id, charge.id, charge.task_id)
