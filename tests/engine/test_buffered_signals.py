"""A signal that comes before its wait exists is buffered, and the wait takes it in the transaction that creates it.

Each test runs only the one runner pass whose transaction creates the wait, and looks right after it: no
later pass may be needed for a buffered signal to be taken.
"""

import datetime as dt

from core import clock
from engine import runner
from engine.signaling import signal_accept
from history.models import (
    Activation,
    Disposition,
    InboxRecord,
    InstanceState,
    Signal,
    SignalState,
    Step,
    StepState,
    Task,
    Wait,
    WaitState,
    WorkflowInstance,
)
from testkit.driver import poll_step, task_step
from tests.engine.test_signals_timers import APPROVAL

AFTER_CHARGE = [task_step("charge"), {**APPROVAL, "after": ["charge"]}]
ORDER = {"order": "o-1"}
FINAL = {"name": "settled", "payload_version": "1", "correlation": "input.order", "deadline_seconds": 600}


def _send(engine, instance, payload=None, *, name="approval", version="v1", **command):
    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command={
            "name": name,
            "payload_version": version,
            "payload": {"approved": True} if payload is None else payload,
            "correlation_key": "o-1",
            "reason": "approved by finance",
            **command,
        },
        idempotency_key=f"signal-{Signal.objects.count()}",
    )


def _buffered(engine, instance, *payloads, **command):
    """Signals sent a second apart (the first is the oldest), their records consumed: BUFFERED, still PENDING."""
    for number, payload in enumerate(payloads):
        with clock.moved(dt.timedelta(seconds=number)):
            _send(engine, instance, payload, **command)
    runner.pass_inbox()
    records = InboxRecord.objects.filter(instance=instance, source_kind="SIGNAL")
    assert {r.disposition for r in records} == {Disposition.BUFFERED}
    signals = list(Signal.objects.filter(workflow=instance).order_by("accepted_at"))
    assert {s.state for s in signals} == {SignalState.PENDING}
    return signals


def _charged(engine, instance) -> None:
    """The TASK step before the signal step is worked; its result record waits for the inbox pass."""
    runner.pass_continuations()
    assert engine.work() is not None


def _wait(instance, key="approve") -> Wait:
    step = Step.objects.get(instance=instance, key=key)
    return Wait.objects.get(pk=Activation.objects.get(pk=step.current_activation_id).wait_id)


def _assert_taken(instance, signal: Signal, key="approve") -> None:
    """The step's wait took ``signal``: wait SATISFIED with it as winner, signal CONSUMED by that wait."""
    wait, step, signal = (
        _wait(instance, key),
        Step.objects.get(instance=instance, key=key),
        Signal.objects.get(pk=signal.pk),
    )
    assert (wait.state, wait.winner_signal_id) == (WaitState.SATISFIED, signal.id)
    assert (signal.state, signal.disposition, signal.consumed_wait_id) == ("CONSUMED", "APPLIED", wait.id)
    assert (step.state, step.output) == (StepState.SUCCEEDED, signal.payload)


def _reload(instance) -> WorkflowInstance:
    return WorkflowInstance.objects.get(pk=instance.pk)


def test_a_signal_step_activated_after_its_signal_came_takes_it_in_the_activating_transaction(engine):
    instance = engine.start(engine.define(AFTER_CHARGE), ORDER)
    (early,) = _buffered(engine, instance, None)
    _charged(engine, instance)
    runner.pass_inbox()  # the result ends charge and activates approve in the same transaction
    _assert_taken(instance, early)
    assert _reload(instance).state == InstanceState.SUCCEEDED


def test_a_first_step_activated_by_the_continuations_pass_takes_its_buffered_signal(engine):
    instance = engine.start(engine.define([APPROVAL]), ORDER)
    (early,) = _buffered(engine, instance, None)  # before the instance's first continuation is applied
    assert Step.objects.get(instance=instance, key="approve").state == StepState.PENDING
    runner.pass_continuations()
    _assert_taken(instance, early)
    assert _reload(instance).state == InstanceState.SUCCEEDED


def test_the_steps_after_a_signal_step_that_took_its_buffered_signal_start_in_the_same_transaction(engine):
    # ship comes first in the definition: it is ready only once approve took its signal.
    definition = engine.define([task_step("ship", after=["approve"]), APPROVAL])
    instance = engine.start(definition, ORDER)
    (early,) = _buffered(engine, instance, None)
    runner.pass_continuations()
    _assert_taken(instance, early)
    assert Step.objects.get(instance=instance, key="ship").state == StepState.ACTIVE
    assert Task.objects.get(source_instance=instance).state == "QUEUED"


def test_a_final_signal_sent_before_the_classification_is_taken_when_the_answer_opens_the_wait(engine):
    instance = engine.start(engine.define([poll_step(final_signal=FINAL)]), {"order": "o-1", "pending_rounds": 0})
    (early,) = _buffered(engine, instance, {"ok": 1}, name="settled", version="1")
    runner.pass_continuations()
    assert engine.work("polls") is not None
    runner.pass_inbox()  # classified SUCCEEDED: the final-signal wait opens and takes the early signal
    _assert_taken(instance, early, key="settle")
    assert _wait(instance, "settle").kind == "POLL_FINAL_SIGNAL"
    assert _reload(instance).state == InstanceState.SUCCEEDED


def test_the_new_wait_takes_the_oldest_of_several_buffered_signals_and_leaves_the_others_pending(engine):
    instance = engine.start(engine.define(AFTER_CHARGE), ORDER)
    oldest, *later = _buffered(engine, instance, {"approved": True, "n": 1}, {"approved": True, "n": 2}, {"n": 3})
    _charged(engine, instance)
    runner.pass_inbox()
    _assert_taken(instance, oldest)
    assert [Signal.objects.get(pk=s.pk).state for s in later] == [SignalState.PENDING, SignalState.PENDING]


def test_a_buffered_signal_breaking_the_contract_sends_the_new_wait_to_review_and_starts_nothing_more(engine):
    steps = [*AFTER_CHARGE, task_step("notify", after=["charge"])]
    instance = engine.start(engine.define(steps), ORDER)
    broken, kept = _buffered(engine, instance, {"nope": 1}, None)
    _charged(engine, instance)
    runner.pass_inbox()
    wait, broken, kept = _wait(instance), Signal.objects.get(pk=broken.pk), Signal.objects.get(pk=kept.pk)
    assert wait.state == WaitState.NEEDS_REVIEW and wait.winner_signal_id is None
    assert (broken.state, broken.disposition) == (SignalState.REJECTED, Disposition.CONTRACT_VIOLATION)
    assert kept.state == SignalState.PENDING  # for a new generation, should the operator rearm the wait
    assert Step.objects.get(instance=instance, key="approve").state == StepState.NEEDS_REVIEW
    instance = _reload(instance)
    assert (instance.state, instance.review_cause) == (InstanceState.NEEDS_REVIEW, "signal_contract_violation")
    # In review no new activation starts: notify, ready at the same moment, waits for Continue.
    assert Step.objects.get(instance=instance, key="notify").state == StepState.PENDING


def test_a_buffered_signal_past_its_expiry_is_never_taken_even_before_the_expiry_pass_marks_it(engine):
    instance = engine.start(engine.define([task_step("charge"), {**AFTER_CHARGE[1], "signal_ttl_seconds": 30}]), ORDER)
    (early,) = _buffered(engine, instance, None)
    clock.advance(dt.timedelta(seconds=31))
    _charged(engine, instance)
    runner.pass_inbox()
    assert _wait(instance).state == WaitState.WAITING
    assert Signal.objects.get(pk=early.pk).state == SignalState.PENDING
    runner.pass_signal_expiry()
    assert Signal.objects.get(pk=early.pk).state == SignalState.EXPIRED
    assert _wait(instance).state == WaitState.WAITING


def test_a_buffered_signal_aimed_at_a_later_activation_is_not_taken_by_an_earlier_one(engine):
    instance = engine.start(engine.define(AFTER_CHARGE), ORDER)
    (aimed,) = _buffered(engine, instance, None, target_activation_sequence=2)
    _charged(engine, instance)
    runner.pass_inbox()
    assert (_wait(instance).state, Signal.objects.get(pk=aimed.pk).state) == (WaitState.WAITING, SignalState.PENDING)


def test_a_signal_of_another_name_or_version_is_rejected_when_consumed_and_never_buffered(engine):
    instance = engine.start(engine.define(AFTER_CHARGE), ORDER)
    _send(engine, instance, version="v2", target_step_key="approve")
    runner.pass_inbox()
    assert InboxRecord.objects.get(source_kind="SIGNAL").disposition == Disposition.REJECTED
    _charged(engine, instance)
    runner.pass_inbox()
    assert Signal.objects.get().state == SignalState.REJECTED and _wait(instance).state == WaitState.WAITING


def test_a_signal_accepted_after_the_waits_deadline_never_wins(engine):
    instance = engine.start(engine.define([APPROVAL]), ORDER)
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=601))
    _send(engine, instance)
    runner.pass_inbox()  # consumed while the wait is still WAITING: accepted_at is past its deadline
    assert InboxRecord.objects.get(source_kind="SIGNAL").disposition == Disposition.BUFFERED
    assert (_wait(instance).state, Signal.objects.get().state) == (WaitState.WAITING, SignalState.PENDING)
    runner.pass_wait_deadlines()
    assert _wait(instance).state == WaitState.EXPIRED


# More waits than a runner pass's batch of candidates once held.
CROWD = 120


def test_a_wait_takes_its_buffered_signal_however_many_other_waits_hold_unmatched_ones(engine):
    """Waits whose buffered signals never match (a wrong correlation key: they stay PENDING until they expire)
    once filled the batch of a runner pass that matched buffered signals after the fact, pass after pass, so a
    wait behind them was never served and its instance hung."""
    crowd = engine.define([{**APPROVAL, "deadline_seconds": 300}])
    waiting = [engine.start(crowd, ORDER) for _ in range(CROWD)]
    runner.runner_settle()
    for instance in waiting:
        _send(engine, instance, correlation_key="misaddressed")
    runner.runner_settle()
    assert Wait.objects.filter(state=WaitState.WAITING).count() == CROWD
    assert Signal.objects.filter(state=SignalState.PENDING).count() == CROWD
    instance = engine.start(engine.define(AFTER_CHARGE), ORDER)
    (early,) = _buffered(engine, instance, None)
    _charged(engine, instance)
    runner.runner_settle()
    _assert_taken(instance, early)
    assert _reload(instance).state == InstanceState.SUCCEEDED
