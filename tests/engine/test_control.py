import datetime as dt

import pytest

from core import clock
from core.errors import Aborted, FailedPrecondition, InvalidArgument
from engine.handlers import claim_execute
from engine.instances import instance_cancel, instance_pause, instance_resume
from engine.runner import pass_stop_settlement
from history.models import Gate, InstanceState, Step, StopKind, Task, TaskState, WorkflowOperation
from testkit.driver import task_step


def _control(engine, action, instance, revision, **extra):
    command = {"expected_control_revision": str(revision), **extra}
    return action(identity=engine.identity, instance_id=instance.id, command=command)


def test_pause_and_resume_move_the_gate_and_bump_both_revisions_with_audit(engine):
    instance = engine.start(engine.define([task_step("a")]))
    paused = _control(engine, instance_pause, instance, 1, reason="maintenance")
    assert paused["paused"] is True and paused["control_revision"] == "2" and paused["revision"] == "2"
    assert not Gate.objects.get(instance=instance).open
    resumed = _control(engine, instance_resume, instance, 2)
    assert resumed["paused"] is False and resumed["control_revision"] == "3"
    assert Gate.objects.get(instance=instance).open
    actions = list(
        WorkflowOperation.objects.filter(workflow=instance).order_by("created_at").values_list("action", flat=True)
    )
    assert actions == ["workflow.start", "workflow.pause", "workflow.resume"]
    pause = WorkflowOperation.objects.get(action="workflow.pause")
    assert pause.before["paused"] is False and pause.after["paused"] is True and pause.reason == "maintenance"


def test_a_stale_control_revision_is_aborted_and_writes_nothing(engine):
    instance = engine.start(engine.define([task_step("a")]))
    _control(engine, instance_pause, instance, 1)
    with pytest.raises(Aborted):
        _control(engine, instance_resume, instance, 1)
    instance.refresh_from_db()
    assert instance.paused and instance.control_revision == 2
    assert WorkflowOperation.objects.filter(action="workflow.resume").count() == 0


@pytest.mark.parametrize(
    ("command", "field"),
    [
        ({}, "expected_control_revision"),
        ({"expected_control_revision": 1}, "expected_control_revision"),
        ({"expected_control_revision": "1", "reason": ""}, "reason"),
        ({"expected_control_revision": "1", "x": 1}, "x"),
    ],
)
def test_control_commands_name_the_bad_field(engine, command, field):
    instance = engine.start(engine.define([task_step("a")]))
    with pytest.raises(InvalidArgument) as caught:
        instance_pause(identity=engine.identity, instance_id=instance.id, command=command)
    assert caught.value.field == field


def test_pausing_twice_or_resuming_unpaused_is_refused(engine):
    instance = engine.start(engine.define([task_step("a")]))
    with pytest.raises(FailedPrecondition):
        _control(engine, instance_resume, instance, 1)
    _control(engine, instance_pause, instance, 1)
    with pytest.raises(FailedPrecondition):
        _control(engine, instance_pause, instance, 2)


def test_cancel_cancels_queued_tasks_releases_permits_and_settles_cancelled(engine, quota_rows):
    instance = engine.start(engine.define([task_step("a"), task_step("b")]))
    engine.settle()
    answer = _control(engine, instance_cancel, instance, 1, reason="customer asked")
    assert answer["state"] == "CANCELLING" and answer["stop_kind"] == "CANCEL"
    assert not Gate.objects.get(instance=instance).open
    engine.settle()
    instance.refresh_from_db()
    assert instance.state == InstanceState.CANCELLED and instance.completed_at is not None
    assert set(Task.objects.values_list("state", "permit_held")) == {(TaskState.CANCELLED, False)}
    assert set(Step.objects.filter(instance=instance).exclude(key="$root").values_list("state", flat=True)) == {
        "CANCELLED"
    }
    application, queues = quota_rows()
    assert application.active_tasks == 0 == queues["payments"].active_tasks


def test_stop_settles_only_when_all_running_work_has_settled(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    _control(engine, instance_cancel, instance, 1)
    engine.settle()
    assert engine.reload(instance).state == InstanceState.CANCELLING
    assert pass_stop_settlement() == 0
    claim_execute(identity=engine.identity, claim=claim)
    engine.settle()
    instance.refresh_from_db()
    assert instance.state == InstanceState.CANCELLED
    assert (
        Step.objects.get(instance=instance, key="a").state == "SUCCEEDED"
    )  # the fact is kept; the stop is not revoked


def test_an_unknown_outcome_during_stopping_puts_the_instance_in_review_keeping_the_stop_intent(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.claim(lease_seconds=5)
    _control(engine, instance_cancel, instance, 1)
    with clock.moved(dt.timedelta(seconds=6)):
        engine.settle()
    instance.refresh_from_db()
    assert instance.state == InstanceState.NEEDS_REVIEW and instance.stop_kind == StopKind.CANCEL
    assert not Gate.objects.get(instance=instance).open


def test_cancel_in_review_records_the_intent_and_the_stop_runner_ignores_it(engine):
    instance = engine.start(engine.define([task_step("a", handler="demo.fail"), task_step("b")]))
    engine.settle()
    engine.work()
    engine.settle()
    instance.refresh_from_db()
    assert instance.state == InstanceState.NEEDS_REVIEW
    _control(engine, instance_cancel, instance, instance.control_revision)
    engine.settle()
    instance.refresh_from_db()
    assert (instance.state, instance.stop_kind) == (InstanceState.NEEDS_REVIEW, StopKind.CANCEL)
    assert Task.objects.filter(state=TaskState.QUEUED).count() == 1
    with pytest.raises(FailedPrecondition):
        _control(engine, instance_cancel, instance, instance.control_revision)


def test_an_instance_deadline_on_a_running_instance_records_fail_and_ends_failed(engine):
    instance = engine.start(engine.define([task_step("a")], deadline_seconds=60))
    engine.settle()
    with clock.moved(dt.timedelta(seconds=61)):
        engine.settle()
    instance.refresh_from_db()
    assert (instance.state, instance.stop_kind) == (InstanceState.FAILED, StopKind.FAIL)


def test_an_instance_deadline_passing_in_review_records_nothing(engine):
    instance = engine.start(engine.define([task_step("a", handler="demo.fail")], deadline_seconds=60))
    engine.settle()
    engine.work()
    engine.settle()
    revision = engine.reload(instance).revision
    with clock.moved(dt.timedelta(seconds=61)):
        engine.settle()
    instance.refresh_from_db()
    assert (instance.state, instance.stop_kind, instance.revision) == (InstanceState.NEEDS_REVIEW, None, revision)


def test_a_stop_waiting_for_running_work_does_not_bump_the_revision_on_every_pass(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.claim()
    _control(engine, instance_cancel, instance, 1)
    engine.settle()
    revision = engine.reload(instance).revision
    for _ in range(3):
        pass_stop_settlement()
    assert engine.reload(instance).revision == revision
