import datetime as dt
from dataclasses import replace

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core import clock, exactjson
from core.errors import AlreadyExists, NotFound, PermissionDenied, Unavailable
from engine import handlers
from engine.check import invariants_check
from engine.handlers import claim_execute
from engine.instances import instance_pause, instance_start
from engine.results import result_event_publish
from engine.runner import pass_continuations, pass_inbox, pass_lease_expiry, runner_pass
from engine.worker import task_claim, task_complete, task_heartbeat
from history.idempotency import Receipt
from history.locking import Level, LockSet
from history.models import (
    Activation,
    Application,
    Attempt,
    Continuation,
    Disposition,
    Gate,
    IdempotencyReceipt,
    InboxRecord,
    InboxState,
    Incident,
    InstanceState,
    Queue,
    ResultEvent,
    ResultKind,
    Step,
    Task,
    TaskState,
    WorkflowInstance,
    WorkflowOperation,
)
from testkit.driver import task_step


def _task_of(instance, key):
    step = Step.objects.get(instance=instance, key=key)
    return Task.objects.get(source_activation_id=step.current_activation_id)


def test_start_creates_running_instance_open_gate_steps_root_and_continuation(engine):
    definition = engine.define([task_step("a"), task_step("b", after=["a"])])
    instance = engine.start(definition, {"x": 1}, business_key="order-7")
    assert instance.state == InstanceState.RUNNING and not instance.paused
    assert Gate.objects.get(instance=instance).open
    assert sorted(Step.objects.filter(instance=instance).values_list("key", "kind", "state")) == [
        ("$root", "ROOT", "ACTIVE"),
        ("a", "TASK", "PENDING"),
        ("b", "TASK", "PENDING"),
    ]
    assert Continuation.objects.get(instance=instance).step_key == "$root"
    assert WorkflowOperation.objects.get(workflow=instance).action == "workflow.start"


def test_start_is_idempotent_per_key_and_refuses_the_key_for_another_command(engine):
    definition = engine.define([task_step("a")])
    command = {"definition": definition.name, "input": {"n": 1}}
    first = instance_start(identity=engine.identity, command=command, idempotency_key="k1")
    again = instance_start(identity=engine.identity, command=command, idempotency_key="k1")
    assert isinstance(again, Receipt) and again.replayed and again.data == first.data
    with pytest.raises(AlreadyExists):
        instance_start(identity=engine.identity, command={**command, "input": {"n": 2}}, idempotency_key="k1")
    assert WorkflowInstance.objects.count() == 1 and IdempotencyReceipt.objects.count() == 1


def test_task_activation_copies_the_fixed_fields_and_takes_a_permit(engine, quota_rows):
    definition = engine.define(
        [task_step("a", priority=5, max_attempts=3, deadline_seconds=600, latest_start_seconds=60)]
    )
    instance = engine.start(definition, exactjson.loads('{"amount": 12345678901234567890123}'), business_key="b-1")
    engine.settle()
    task = _task_of(instance, "a")
    activation = Activation.objects.get(pk=task.source_activation_id)
    assert activation.sequence == 1 and activation.task_id == task.id
    assert (task.handler, task.queue.name, task.priority, task.max_attempts) == ("demo.echo", "payments", 5, 3)
    assert task.input == '{"amount":12345678901234567890123}' and task.business_key == "b-1"
    assert task.concurrency_key == f"{instance.id}/a" and task.source_instance_id == instance.id
    assert task.deadline_at == activation.deadline_at == activation.created_at + dt.timedelta(seconds=600)
    assert task.latest_start_at == activation.created_at + dt.timedelta(seconds=60)
    application, queues = quota_rows()
    assert task.permit_held and application.active_tasks == 1 and queues["payments"].active_tasks == 1


def test_a_full_quota_starts_no_task_and_leaves_the_step_pending_until_a_permit_frees(engine, quota_rows):
    engine.application.max_active_tasks = 1
    engine.application.save()
    definition = engine.define([task_step("a")])
    first, second = engine.start(definition), engine.start(definition)
    engine.settle()
    assert Task.objects.count() == 1
    waiting = second if Task.objects.get().source_instance_id == first.id else first
    assert Step.objects.get(instance=waiting, key="a").state == "PENDING"
    assert Continuation.objects.filter(instance=waiting, state="PENDING").exists()
    engine.work()
    engine.settle()
    assert Step.objects.get(instance=waiting, key="a").state == "ACTIVE"
    application, _ = quota_rows()
    assert application.active_tasks == 1 == Task.objects.filter(permit_held=True).count()


def test_a_result_advances_its_instance_in_its_own_transaction_or_leaves_a_continuation_when_full(engine):
    engine.application.max_active_tasks = 1
    engine.application.save()
    chain = engine.start(engine.define([task_step("a"), task_step("b", after=["a"])]))
    engine.settle()
    engine.work()  # chain's a ends: its permit is free again
    other = engine.start(engine.define([task_step("a")], name="other"))
    pass_continuations()  # the other instance's task takes the only permit
    assert pass_inbox() == 1
    steps = dict(Step.objects.filter(instance=chain).values_list("key", "state"))
    assert (steps["a"], steps["b"]) == ("SUCCEEDED", "PENDING")
    assert list(Continuation.objects.filter(instance=chain, state="PENDING").values_list("step_key", flat=True)) == [
        "a"
    ]
    engine.work()  # the other's task ends; the runner retries the chain's continuation
    engine.settle()
    assert Step.objects.get(instance=chain, key="b").state == "ACTIVE"
    assert engine.reload(other).state == "SUCCEEDED"
    assert dict(Continuation.objects.filter(instance=chain).values_list("step_key", "state")) == {
        "$root": "APPLIED",
        "a": "APPLIED",
    }


@pytest.mark.parametrize("row", ["application", "queue"])
def test_a_completion_whose_counter_is_already_zero_is_refused_and_writes_nothing(engine, quota_rows, row):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    model = Application if row == "application" else Queue
    model.objects.filter(pk=getattr(claim.task, f"{row}_id")).update(active_tasks=0)
    command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}}
    with pytest.raises(Unavailable, match="already at zero"):
        task_complete(identity=engine.identity, task_id=claim.task.id, command=command)
    task = Task.objects.get(pk=claim.task.id)
    assert (task.state, task.permit_held, Attempt.objects.get().state) == ("LEASED", True, "RUNNING")
    application, queues = quota_rows()
    assert (application.active_tasks, queues["payments"].active_tasks) == ((0, 1) if row == "application" else (1, 0))
    assert not ResultEvent.objects.exists()


def test_claim_takes_the_highest_priority_task_through_an_open_gate_only(engine):
    low = engine.define([task_step("a", priority=1)])
    high = engine.define([task_step("a", priority=9)])
    paused = engine.start(high)
    engine.start(low)
    wanted = engine.start(high)
    engine.settle()
    instance_pause(identity=engine.identity, instance_id=paused.id, command={"expected_control_revision": "1"})
    claim = engine.claim()
    assert claim.task.source_instance_id == wanted.id and claim.attempt.number == 1
    assert claim.task.state == TaskState.LEASED
    second = engine.claim()
    assert second.task.priority == 1
    assert engine.claim() is None  # only the paused instance's task is left: its gate is closed
    assert _task_of(paused, "a").state == TaskState.QUEUED


@pytest.mark.parametrize(
    "bounds",
    [{"latest_start_seconds": 30}, {"deadline_seconds": 30}, {"deadline_seconds": 30, "latest_start_seconds": 20}],
    ids=["latest start", "deadline", "both"],
)
def test_a_task_past_its_latest_start_or_deadline_is_not_claimed_and_fails_by_deadline(engine, bounds):
    definition = engine.define([task_step("a", **bounds)])
    instance = engine.start(definition)
    engine.settle()
    with clock.moved(dt.timedelta(seconds=31)):
        assert engine.claim() is None
        assert runner_pass()["task_deadlines"] == 1  # once, past both bounds too
        task = _task_of(instance, "a")
        assert task.state == TaskState.FAILED and not task.permit_held
        assert exactjson.loads(task.result)["error"] == "deadline_exceeded"
        engine.settle()
        assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_heartbeat_extends_the_lease(engine):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim(lease_seconds=10)
    with clock.moved(dt.timedelta(seconds=8)):
        beat = task_heartbeat(
            identity=engine.identity,
            task_id=claim.task.id,
            command={"attempt_id": claim.attempt.id, "lease_seconds": 10},
        )
        assert beat.attempt.lease_expires_at > claim.attempt.lease_expires_at and not beat.late
    with clock.moved(dt.timedelta(seconds=12)):
        assert pass_lease_expiry() == 0


def test_a_retryable_failure_with_attempts_left_requeues_without_a_result_event(engine):
    instance = engine.start(engine.define([task_step("a", handler="demo.fail", max_attempts=2)]), {"retryable": True})
    engine.settle()
    engine.work()
    task = _task_of(instance, "a")
    assert task.state == TaskState.QUEUED and task.attempt_count == 1 and task.permit_held
    assert not ResultEvent.objects.exists()
    engine.work()
    engine.settle()
    task.refresh_from_db()
    assert task.state == TaskState.FAILED and task.attempt_count == 2 and not task.permit_held
    assert list(Attempt.objects.filter(task=task).values_list("state", flat=True)) == ["FAILED", "FAILED"]


def test_a_terminal_failure_fails_activation_and_step_and_puts_the_instance_in_review(engine, quota_rows):
    instance = engine.start(engine.define([task_step("a", handler="demo.fail", max_attempts=3)]))
    engine.settle()
    engine.work()
    engine.settle()
    instance.refresh_from_db()
    step = Step.objects.get(instance=instance, key="a")
    assert (instance.state, step.state, Activation.objects.get(step=step).state) == ("NEEDS_REVIEW", "FAILED", "FAILED")
    assert not Gate.objects.get(instance=instance).open
    task = _task_of(instance, "a")
    assert task.attempt_count == 1 and task.max_attempts == 3 and not task.permit_held
    application, queues = quota_rows()
    assert application.active_tasks == 0 == queues["payments"].active_tasks


def test_lease_expiry_records_unknown_keeps_the_permit_and_is_never_auto_retried(engine, quota_rows):
    instance = engine.start(engine.define([task_step("a", max_attempts=3)]))
    engine.settle()
    claim = engine.claim(lease_seconds=5)
    with clock.moved(dt.timedelta(seconds=6)):
        engine.settle()
        for _ in range(3):
            runner_pass()
        task = Task.objects.get(pk=claim.task.id)
        assert task.state == TaskState.NEEDS_REVIEW and task.permit_held and task.attempt_count == 1
        assert Attempt.objects.get(task=task).state == "UNKNOWN"
        assert ResultEvent.objects.get(task=task).kind == ResultKind.UNKNOWN
        step = Step.objects.get(instance=instance, key="a")
        assert step.state == "NEEDS_REVIEW" and Activation.objects.get(step=step).state == "NEEDS_REVIEW"
        assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
        assert Task.objects.count() == 1 and engine.claim() is None
        application, _ = quota_rows()
        assert application.active_tasks == 1
        # The lost lease's worker is told its work is late (tests/engine/test_late_evidence.py: what is kept).
        assert task_heartbeat(identity=engine.identity, task_id=task.id, command={"attempt_id": claim.attempt.id}).late
        completion = task_complete(
            identity=engine.identity,
            task_id=task.id,
            command={"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {}},
        )
        assert completion.late and completion.task.state == TaskState.NEEDS_REVIEW
        assert Attempt.objects.get(task=task).state == "UNKNOWN" and quota_rows()[0].active_tasks == 1


def test_sibling_results_are_consumed_during_review_but_start_no_new_activation(engine):
    definition = engine.define(
        [task_step("bad", handler="demo.fail"), task_step("good"), task_step("next", after=["good"])]
    )
    instance = engine.start(definition)
    engine.settle()
    bad, good = _task_of(instance, "bad"), _task_of(instance, "good")
    claim_good = engine.claim()
    claim_bad = engine.claim()
    assert {claim_good.task.id, claim_bad.task.id} == {bad.id, good.id}
    bad_claim = claim_good if claim_good.task.id == bad.id else claim_bad
    good_claim = claim_bad if bad_claim is claim_good else claim_good
    claim_execute(identity=engine.identity, claim=bad_claim)
    engine.settle()
    in_review = engine.reload(instance)
    assert in_review.state == InstanceState.NEEDS_REVIEW
    revision_in_review = in_review.revision
    claim_execute(identity=engine.identity, claim=good_claim)
    engine.settle()
    after = engine.reload(instance)
    assert after.revision > revision_in_review and after.state == InstanceState.NEEDS_REVIEW
    assert Step.objects.get(instance=instance, key="good").state == "SUCCEEDED"
    assert Step.objects.get(instance=instance, key="next").state == "PENDING"
    assert not Activation.objects.filter(step__key="next").exists()


def _second_activation(instance, key):
    """What RetryStep leaves behind: activation 2 with its own task, the step pointing at it."""
    with transaction.atomic():
        step = Step.objects.get(instance=instance, key=key)
        old = Activation.objects.get(pk=step.current_activation_id)
        new = Activation.objects.create(step=step, instance=instance, sequence=2, input=old.input)
        step.current_activation = new
        step.revision += 1
        step.save()
        instance.revision += 1
        instance.save()
    return old, new


def test_a_late_result_of_an_old_activation_is_only_recorded(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    old, new = _second_activation(engine.reload(instance), "a")
    claim_execute(identity=engine.identity, claim=claim)
    engine.settle()
    record = InboxRecord.objects.get(task_id=claim.task.id)
    assert record.state == InboxState.CONSUMED and record.disposition == Disposition.LATE_RECORDED
    step = Step.objects.get(instance=instance, key="a")
    assert step.current_activation_id == new.id and step.state == "ACTIVE"
    assert Activation.objects.get(pk=new.id).state == "ACTIVE"
    assert Activation.objects.get(pk=old.id).state == "ACTIVE"


def _review_task(task, outcome, result):
    """What ReviewTask leaves behind: the task concluded, permit released, a REVIEWED event published."""
    from engine.quota import quota_of_task

    with transaction.atomic():
        locks = LockSet()
        task = Task.objects.select_for_update().get(pk=task.id)
        task.state = outcome
        task.review_conclusion = outcome
        task.result = result
        task.execution_settled = True
        quota_of_task(locks=locks, task=task).release(task)
        task.revision += 1
        task.save()
        instance = WorkflowInstance.objects.get(pk=task.source_instance_id)
        instance.revision += 1
        instance.save()
        result_event_publish(locks=locks, task=task, kind=ResultKind.REVIEWED, outcome=outcome, result=result)


def test_a_reviewed_event_records_the_verified_outcome_but_resolves_nothing(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim(lease_seconds=5)
    with clock.moved(dt.timedelta(seconds=6)):
        engine.settle()
        _review_task(Task.objects.get(pk=claim.task.id), "SUCCEEDED", '{"paid":true}')
        assert pass_inbox() == 1
        activation = Activation.objects.get(pk=claim.task.source_activation_id)
        assert (activation.verified_outcome, activation.verified_result) == ("SUCCEEDED", '{"paid":true}')
        assert activation.state == "NEEDS_REVIEW"
        assert Step.objects.get(instance=instance, key="a").state == "NEEDS_REVIEW"
        assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_a_record_whose_task_belongs_elsewhere_is_quarantined_and_puts_the_instance_in_review(engine):
    definition = engine.define([task_step("a")])
    instance, other = engine.start(definition), engine.start(definition)
    engine.settle()
    claim = engine.claim()
    owner = claim.task.source_instance_id
    stranger = other.id if owner == instance.id else instance.id
    Task.objects.filter(pk=claim.task.id).update(source_instance_id=stranger)
    claim_execute(identity=engine.identity, claim=claim)
    engine.settle()
    record = InboxRecord.objects.get(task_id=claim.task.id)
    assert record.state == InboxState.QUARANTINED and record.quarantine_reason
    assert record.instance_id == stranger
    assert WorkflowInstance.objects.get(pk=stranger).state == InstanceState.NEEDS_REVIEW


@pytest.mark.parametrize(
    "corrupt",
    [{"source_id": "0" * 32}, {"source_kind": "SIGNAL"}],
    ids=["its event missing", "named as a signal"],
)
def test_a_result_record_whose_source_is_not_its_event_is_quarantined(engine, corrupt):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.work()
    InboxRecord.objects.update(**corrupt)
    engine.settle()
    record = InboxRecord.objects.get()
    assert record.state == InboxState.QUARANTINED and record.quarantine_reason
    assert Step.objects.get(instance=instance, key="a").state == "ACTIVE"
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_a_result_that_breaks_the_contract_puts_the_step_in_review(engine):
    contract = {"type": "object", "required": ["paid"]}
    instance = engine.start(engine.define([task_step("a", contract=contract)]), {"other": 1})
    engine.settle()
    engine.work()
    engine.settle()
    assert Step.objects.get(instance=instance, key="a").state == "NEEDS_REVIEW"
    assert InboxRecord.objects.get().disposition == Disposition.CONTRACT_VIOLATION
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_a_full_queue_quota_starts_no_task_either(engine, quota_rows):
    Queue.objects.filter(name="payments").update(max_active_tasks=1)
    definition = engine.define([task_step("a"), task_step("b")])
    instance = engine.start(definition)
    engine.settle()
    assert Task.objects.count() == 1
    assert sorted(Step.objects.filter(instance=instance).exclude(key="$root").values_list("state", flat=True)) == [
        "ACTIVE",
        "PENDING",
    ]
    _, queues = quota_rows()
    assert queues["payments"].active_tasks == 1


def test_a_full_queue_at_the_first_take_leaves_the_application_s_count_as_it_was(engine, quota_rows):
    # The application's slot is taken first, by its own increment; the queue's refusal gives it back.
    Queue.objects.filter(name="payments").update(max_active_tasks=0)
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    application, queues = quota_rows()
    assert (application.active_tasks, queues["payments"].active_tasks, Task.objects.count()) == (0, 0, 0)
    assert Step.objects.get(instance=instance, key="a").state == "PENDING"
    Queue.objects.filter(name="payments").update(max_active_tasks=1)
    engine.settle()
    application, queues = quota_rows()
    assert (application.active_tasks, queues["payments"].active_tasks, Task.objects.count()) == (1, 1, 1)
    assert invariants_check() == []


def test_a_take_from_a_queue_that_does_not_exist_changes_no_count_and_is_refused(engine, quota_rows):
    instance = engine.start(engine.define([task_step("a")]))
    Queue.objects.filter(name="payments").delete()
    engine.settle()
    application, _ = quota_rows()
    assert (application.active_tasks, Task.objects.count()) == (0, 0)
    assert Step.objects.get(instance=instance, key="a").state == "PENDING"
    incident = Incident.objects.get(duty="continuations")
    assert "missing application or queue" in incident.message


def test_one_transaction_takes_a_permit_for_each_step_it_activates(engine, quota_rows):
    instance = engine.start(engine.define([task_step("a"), task_step("b"), task_step("c")]))
    engine.settle()
    assert Step.objects.filter(instance=instance, state="ACTIVE").exclude(key="$root").count() == 3
    application, queues = quota_rows()
    assert (
        application.active_tasks
        == queues["payments"].active_tasks
        == 3
        == Task.objects.filter(permit_held=True).count()
    )
    assert invariants_check() == []


def test_no_task_of_an_instance_in_review_is_authorised(engine):
    instance = engine.start(engine.define([task_step("bad", handler="demo.fail"), task_step("other", priority=-1)]))
    engine.settle()
    engine.work()
    engine.settle()
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
    assert Task.objects.filter(state=TaskState.QUEUED).count() == 1
    assert engine.claim() is None


def test_records_of_a_missing_instance_are_quarantined(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.work()
    WorkflowInstance.objects.filter(pk=instance.id).delete()
    engine.settle()
    record = InboxRecord.objects.get()
    assert record.state == InboxState.QUARANTINED and "does not exist" in record.quarantine_reason


def test_services_refuse_an_identity_without_the_scope(engine):
    reader = replace(engine.identity, scopes=frozenset({"workflows:read"}))
    definition = engine.define([task_step("a")])
    with pytest.raises(PermissionDenied):
        instance_start(identity=reader, command={"definition": definition.name, "input": {}}, idempotency_key="k")
    with pytest.raises(PermissionDenied):
        task_claim(identity=reader, queue_name="payments", command={"worker": "w"})
    assert not WorkflowInstance.objects.exists()


def test_the_worker_completes_what_it_claimed_without_reading_the_task_again(engine):
    engine.start(engine.define([task_step("a"), task_step("b")]))
    engine.settle()
    first, second = engine.claim(), engine.claim()

    def completed(claim, **claimed) -> int:
        command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {}}
        with CaptureQueriesContext(connection) as captured:
            task_complete(identity=engine.identity, task_id=claim.task.id, command=command, **claimed)
        return len(captured)

    assert completed(first) == completed(second, claimed=second.task) + 1
    assert {t.state for t in Task.objects.all()} == {TaskState.SUCCEEDED}


def test_a_claimed_task_is_still_one_the_identity_may_work(engine):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {}}
    elsewhere = replace(engine.identity, queues=frozenset({"polls"}))
    with pytest.raises(NotFound):
        task_complete(identity=elsewhere, task_id=claim.task.id, command=command, claimed=claim.task)
    assert engine.reload(claim.task).state == TaskState.LEASED


def test_a_record_whose_task_left_its_fixed_queue_is_quarantined(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.work()
    Task.objects.update(queue=engine.queues["polls"])
    engine.settle()
    record = InboxRecord.objects.get()
    assert record.state == InboxState.QUARANTINED and "fixed queue" in record.quarantine_reason
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
    assert Step.objects.get(instance=instance, key="a").state == "ACTIVE"


def test_a_record_whose_task_names_no_queue_is_quarantined(engine):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.work()
    Task.objects.update(queue_id="0" * 32)
    engine.settle()
    record = InboxRecord.objects.get()
    assert record.state == InboxState.QUARANTINED and "fixed queue" in record.quarantine_reason


def test_a_locked_row_is_the_row_the_queryset_reads_and_saves_nothing_when_unchanged(engine):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    models = ((Level.INSTANCE, WorkflowInstance), (Level.GATE, Gate), (Level.TASK, Task))
    keys = {Level.INSTANCE: claim.task.source_instance_id, Level.GATE: claim.task.source_instance_id}
    keys[Level.TASK] = claim.task.id
    with transaction.atomic():
        locks = LockSet()
        for level, model in models:
            locked = locks.lock_one(level, keys[level])
            read = model.objects.get(pk=keys[level])
            names = [field.attname for field in model._meta.concrete_fields]
            assert [getattr(locked, name) for name in names] == [getattr(read, name) for name in names]
            if model is not Gate:  # a row the timeline follows remembers what it was read with
                with CaptureQueriesContext(connection) as captured:
                    locked.save()
                assert len(captured) == 0


def test_a_worker_sends_its_answer_again_when_its_commit_collides(engine, monkeypatch):
    engine.start(engine.define([task_step("a")]))
    runner_pass()
    claim = engine.claim()
    sent = []

    def colliding_once(**kwargs):
        sent.append(kwargs["command"]["attempt_id"])
        if len(sent) == 1:  # as a certification conflict on a cluster reads
            raise OperationalError(1213, "Deadlock found when trying to get lock; try restarting transaction")
        return task_complete(**kwargs)

    monkeypatch.setattr(handlers, "task_complete", colliding_once)
    completion = claim_execute(identity=engine.identity, claim=claim)
    assert sent == [claim.attempt.id, claim.attempt.id] and not completion.late
    assert Attempt.objects.get(pk=claim.attempt.id).state == "SUCCEEDED"
