import json

from django.core.management import call_command

from core import clock
from engine.check import invariants_check
from engine.demo import SCENARIOS
from history.models import (
    Activation,
    Attempt,
    Gate,
    InstanceState,
    Namespace,
    Signal,
    Step,
    Task,
    Wait,
    WorkflowInstance,
)


def _state(entry):
    instance = WorkflowInstance.objects.get(pk=entry["instance_id"])
    step = Step.objects.get(instance=instance, key=entry["step_key"])
    activation = Activation.objects.get(pk=step.current_activation_id) if step.current_activation_id else None
    task = Task.objects.get(pk=entry["task_id"]) if "task_id" in entry else None
    return instance, step, activation, task


def test_weave_demo_json_reaches_every_scenario_in_its_documented_state_and_check_is_clean(db, capsys):
    call_command("weave_demo", "--json")
    result = json.loads(capsys.readouterr().out)
    assert result["namespace"] == "demo" and set(result["scenarios"]) == set(SCENARIOS)
    s = result["scenarios"]

    instance, step, activation, task = _state(s["task_unknown"])
    assert (instance.state, step.state, activation.state, task.state) == ("NEEDS_REVIEW",) * 4
    assert task.permit_held and list(Attempt.objects.filter(task=task).values_list("state", flat=True)) == ["UNKNOWN"]

    instance, step, activation, task = _state(s["task_failed_budget_left"])
    assert (instance.state, step.state, activation.state, task.state) == ("NEEDS_REVIEW", "FAILED", "FAILED", "FAILED")
    assert (task.attempt_count, task.max_attempts) == (1, 3)

    instance, step, activation, task = _state(s["poll_request_failed"])
    assert (instance.state, step.state, activation.state, task.state) == ("NEEDS_REVIEW", "FAILED", "FAILED", "FAILED")
    assert (task.attempt_count, task.max_attempts, task.source_round, activation.used_rounds) == (1, 2, 1, 0)

    instance, step, activation, task = _state(s["poll_exhausted"])
    assert (instance.state, step.state, activation.state) == ("NEEDS_REVIEW",) * 3
    assert (activation.used_rounds, activation.max_rounds, activation.last_round_classification) == (2, 2, "PENDING")
    assert task.state == "SUCCEEDED" and task.source_round == 2

    instance, step, activation, task = _state(s["cancel_unknown"])
    assert (instance.state, instance.stop_kind, step.state, task.state) == (
        "NEEDS_REVIEW",
        "CANCEL",
        "NEEDS_REVIEW",
        "NEEDS_REVIEW",
    )

    instance, step, activation, _ = _state(s["signal_rearm"])
    wait = Wait.objects.get(pk=activation.wait_id)
    assert (instance.state, step.state, activation.state, wait.state) == ("NEEDS_REVIEW",) * 4
    assert wait.deadline_at > clock.now() and Signal.objects.get(workflow=instance).disposition == "CONTRACT_VIOLATION"

    instance, step, activation, task = _state(s["poll_pending_review"])
    assert (instance.state, activation.state, task.state, task.source_round) == (
        "NEEDS_REVIEW",
        "NEEDS_REVIEW",
        "NEEDS_REVIEW",
        2,
    )
    assert (activation.used_rounds, activation.last_round_classification) == (1, "")

    instance, step, _, _ = _state(s["expired_in_review"])
    assert instance.state == "NEEDS_REVIEW" and instance.deadline_at < clock.now() and instance.stop_kind is None

    instance, step, _, task = _state(s["paused"])
    assert (instance.state, instance.paused, task.state) == ("RUNNING", True, "QUEUED")
    assert not Gate.objects.get(instance=instance).open

    instance, step, _, _ = _state(s["parallel_job_done"])
    assert instance.state == InstanceState.SUCCEEDED and step.state == "SUCCEEDED"
    waits = Wait.objects.filter(instance=instance)
    assert waits.count() == 2
    for wait in waits:
        assert wait.state == "SATISFIED" and Signal.objects.get(pk=wait.winner_signal_id).consumed_wait_id == wait.id

    assert invariants_check() == []
    assert WorkflowInstance.objects.filter(updated_at__gt=clock.now()).count() == 0
    call_command("weave_check")


def test_weave_demo_again_lists_the_scenarios_it_seeded_and_seeds_nothing(db, capsys):
    call_command("weave_demo", "--json")
    first = json.loads(capsys.readouterr().out)
    rows = WorkflowInstance.objects.count()
    call_command("weave_demo", "--json")
    assert json.loads(capsys.readouterr().out) == first
    assert WorkflowInstance.objects.count() == rows and list(Namespace.objects.values_list("name", flat=True)) == [
        "demo"
    ]
    call_command("weave_demo")
    listed = capsys.readouterr().out
    assert listed.startswith("namespace demo\n")
    assert all(f"{name:24} instance {entry['instance_id']}" in listed for name, entry in first["scenarios"].items())
