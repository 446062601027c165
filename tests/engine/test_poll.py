import datetime as dt

from django.db import transaction

from core import clock
from engine.activation import poll_round_start
from engine.poll import NextRound, NoRound, poll_next_round, poll_rounds_left
from engine.quota import quota_of
from engine.runner import pass_poll_rounds
from history.locking import LockSet
from history.models import Activation, InstanceState, PollRound, ResultEvent, Step, Task, TaskState, Wait
from testkit.driver import poll_step
from tests.engine.test_task_flow import _review_task


def _activation(instance):
    return Activation.objects.get(step=Step.objects.get(instance=instance, key="settle"))


def test_each_round_has_one_query_task_with_the_round_attempt_budget(engine):
    instance = engine.start(engine.define([poll_step()]), {"pending_rounds": 1})
    engine.settle()
    activation = _activation(instance)
    task = Task.objects.get(source_activation_id=activation.id)
    assert (task.max_attempts, task.source_round, task.queue.name) == (2, 1, "polls")
    assert PollRound.objects.get(activation=activation).task_id == task.id == activation.last_task_id
    assert activation.poll_deadline_at == activation.created_at + dt.timedelta(seconds=3600)
    assert (activation.max_rounds, activation.attempts_per_round, activation.interval_seconds) == (3, 2, 60)


def test_pending_opens_the_next_round_at_completion_plus_interval_and_done_succeeds(engine):
    instance = engine.start(engine.define([poll_step()]), {"pending_rounds": 1})
    engine.settle()
    engine.work("polls")
    engine.settle()
    activation = _activation(instance)
    completed = ResultEvent.objects.get().created_at
    assert activation.state == "WAITING" and activation.next_round_at == completed + dt.timedelta(seconds=60)
    assert (activation.used_rounds, activation.last_round_classification) == (1, "PENDING")
    assert pass_poll_rounds() == 0  # not due yet
    with clock.moved(dt.timedelta(seconds=61)):
        engine.settle()
        assert PollRound.objects.filter(activation=activation).count() == 2
        engine.work("polls")
        engine.settle()
    activation.refresh_from_db()
    assert activation.state == "SUCCEEDED" and activation.used_rounds == 2
    instance.refresh_from_db()
    assert instance.state == InstanceState.SUCCEEDED
    assert instance.output == '{"settle":{"status":"done","round":2}}'


def _run_rounds(engine, rounds):
    for _ in range(rounds):
        engine.settle()
        engine.work("polls")
        clock.advance(dt.timedelta(seconds=61))
    engine.settle()


def test_rounds_exhausted_puts_the_poll_in_review(engine):
    instance = engine.start(engine.define([poll_step(max_rounds=2)]), {"pending_rounds": 9})
    try:
        _run_rounds(engine, 2)
    finally:
        clock.set_offset(dt.timedelta(0))
    activation = _activation(instance)
    assert (activation.state, activation.used_rounds, activation.last_round_classification) == (
        "NEEDS_REVIEW",
        2,
        "PENDING",
    )
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
    assert Task.objects.count() == 2


def test_a_next_round_past_the_poll_deadline_puts_the_poll_in_review(engine):
    instance = engine.start(engine.define([poll_step(poll_deadline_seconds=90)]), {"pending_rounds": 9})
    engine.settle()
    engine.work("polls")
    with clock.moved(dt.timedelta(seconds=40)):
        engine.work("polls")
    engine.settle()
    activation = _activation(instance)
    assert activation.used_rounds == 1 and activation.state == "WAITING"
    with clock.moved(dt.timedelta(seconds=61)):
        engine.settle()
        engine.work("polls")
        engine.settle()
    activation.refresh_from_db()
    assert activation.state == "NEEDS_REVIEW" and activation.used_rounds == 2


def test_a_failed_query_fails_the_step_and_puts_the_instance_in_review(engine):
    instance = engine.start(engine.define([poll_step(handler="demo.fail")]))
    engine.settle()
    engine.work("polls")
    engine.settle()
    task = Task.objects.get()
    assert task.state == TaskState.FAILED and task.attempt_count == 1 and task.max_attempts == 2
    activation = _activation(instance)
    assert activation.state == "FAILED" and activation.used_rounds == 0
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_a_failed_classification_fails_the_step(engine):
    mapping = {"field": "status", "values": {"done": "SUCCEEDED", "pending": "FAILED"}}
    instance = engine.start(engine.define([poll_step(mapping=mapping)]), {"pending_rounds": 1})
    engine.settle()
    engine.work("polls")
    engine.settle()
    activation = _activation(instance)
    assert (activation.state, activation.last_round_classification) == ("FAILED", "FAILED")
    assert Step.objects.get(instance=instance, key="settle").state == "FAILED"


def test_a_reviewed_pending_answer_is_classified_but_the_poll_stays_in_review(engine):
    instance = engine.start(engine.define([poll_step(handler="demo.hang")]))
    engine.settle()
    claim = engine.claim("polls", lease_seconds=5)
    with clock.moved(dt.timedelta(seconds=6)):
        engine.settle()
        activation = _activation(instance)
        assert activation.state == "NEEDS_REVIEW" and activation.used_rounds == 0
        _review_task(Task.objects.get(pk=claim.task.id), "SUCCEEDED", '{"status":"pending"}')
        engine.settle()
    activation.refresh_from_db()
    assert (activation.last_round_classification, activation.used_rounds) == ("PENDING", 1)
    assert activation.state == "NEEDS_REVIEW" and activation.verified_outcome == "SUCCEEDED"
    assert Step.objects.get(instance=instance, key="settle").state == "NEEDS_REVIEW"
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_no_round_opens_while_the_instance_is_in_review(engine):
    definition = engine.define(
        [poll_step(), {"key": "boom", "kind": "TASK", "handler": "demo.fail", "queue": "payments"}]
    )
    instance = engine.start(definition, {"pending_rounds": 5})
    engine.settle()
    engine.work("polls")
    engine.work("payments")
    engine.settle()
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
    with clock.moved(dt.timedelta(seconds=120)):
        engine.settle()
    assert PollRound.objects.count() == 1


def test_a_succeeded_classification_waits_for_the_final_signal(engine):
    final = {"name": "settled", "payload_version": "1", "correlation": "business_key", "deadline_seconds": 600}
    instance = engine.start(engine.define([poll_step(final_signal=final)]), {"pending_rounds": 0}, business_key="o-1")
    engine.settle()
    engine.work("polls")
    engine.settle()
    activation = _activation(instance)
    wait = Wait.objects.get(pk=activation.wait_id)
    assert (activation.state, wait.kind, wait.correlation_key) == ("WAITING", "POLL_FINAL_SIGNAL", "o-1")
    from engine.signaling import signal_accept

    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command={
            "name": "settled",
            "payload_version": "1",
            "payload": {"ok": 1},
            "correlation_key": "o-1",
            "reason": "bank",
        },
        idempotency_key="sig-1",
    )
    engine.settle()
    wait.refresh_from_db()
    assert wait.state == "SATISFIED" and wait.winner_signal_id is not None
    assert engine.reload(instance).state == InstanceState.SUCCEEDED


def test_a_reviewed_answer_of_a_later_round_is_classified_for_that_round(engine):
    instance = engine.start(engine.define([poll_step()]), {"pending_rounds": 1})
    engine.settle()
    engine.work("polls")
    clock.advance(dt.timedelta(seconds=61))
    engine.settle()
    activation = _activation(instance)
    assert (activation.used_rounds, activation.last_round_classification) == (1, "")
    claim = engine.claim("polls", lease_seconds=5)
    clock.advance(dt.timedelta(seconds=6))
    engine.settle()
    _review_task(Task.objects.get(pk=claim.task.id), "SUCCEEDED", '{"status":"pending"}')
    engine.settle()
    activation.refresh_from_db()
    assert (activation.state, activation.used_rounds, activation.last_round_classification) == (
        "NEEDS_REVIEW",
        2,
        "PENDING",
    )


def test_a_round_can_be_reopened_with_the_remaining_attempts_and_its_original_deadline(engine):
    """The shape RetryStep needs: same business round, remaining budget, original deadline, retry_of."""
    instance = engine.start(engine.define([poll_step(handler="demo.fail")]))
    engine.settle()
    engine.work("polls")
    engine.settle()
    failed = Task.objects.get()
    activation = _activation(instance)
    with transaction.atomic():
        locks = LockSet()
        quota = quota_of(locks=locks, definition=instance.definition)
        task = poll_round_start(
            locks=locks,
            quota=quota,
            instance=instance,
            activation=activation,
            spec=instance.definition.step_spec("settle"),
            max_attempts=1,
            deadline_at=failed.deadline_at,
            retry_of=failed,
        )
    assert (task.source_round, task.max_attempts, task.deadline_at, task.retry_of_id) == (
        1,
        1,
        failed.deadline_at,
        failed.id,
    )
    assert task.permit_held and PollRound.objects.filter(round=1).count() == 2


def test_the_next_round_rule_is_judged_on_the_limits_first_then_on_the_due_time():
    answered = clock.now()
    limits = {"used_rounds": 1, "max_rounds": 3, "interval_seconds": 60}
    activation = Activation(**limits, poll_deadline_at=answered + dt.timedelta(seconds=61))
    assert poll_next_round(activation, answered_at=answered) == NextRound(answered + dt.timedelta(seconds=60), None)
    activation.poll_deadline_at = answered + dt.timedelta(seconds=60)
    assert poll_next_round(activation, answered_at=answered).refusal == NoRound.DUE_AFTER_DEADLINE
    activation.used_rounds = 3
    assert poll_next_round(activation, answered_at=answered).refusal == NoRound.ROUNDS_USED


def test_an_operator_continuing_later_also_needs_the_deadline_ahead_of_now():
    answered = clock.now()
    activation = Activation(used_rounds=1, max_rounds=3, interval_seconds=60, poll_deadline_at=answered)
    assert poll_rounds_left(activation) is None
    assert poll_rounds_left(activation, now=answered) == NoRound.DEADLINE_PASSED
    assert poll_next_round(activation, answered_at=answered, now=answered).refusal == NoRound.DEADLINE_PASSED
    # Without limits: no round left, and no deadline to pass.
    assert poll_rounds_left(Activation(), now=answered) == NoRound.ROUNDS_USED
    assert poll_rounds_left(Activation(used_rounds=0, max_rounds=1), now=answered) is None
