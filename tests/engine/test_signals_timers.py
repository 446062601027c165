import datetime as dt

import pytest
from django.db import transaction

from core import clock
from core.errors import FailedPrecondition, InvalidArgument
from engine.signaling import signal_accept
from history.models import (
    Activation,
    Disposition,
    InboxRecord,
    InstanceState,
    Signal,
    SignalOperation,
    Step,
    Wait,
)
from testkit.driver import task_step

APPROVAL = {
    "key": "approve",
    "kind": "SIGNAL",
    "name": "approval",
    "payload_version": "v1",
    "correlation": "input.order",
    "deadline_seconds": 600,
    "contract": {"type": "object", "required": ["approved"]},
}


def _signal(engine, instance, key, **command):
    body = {
        "name": "approval",
        "payload_version": "v1",
        "payload": {"approved": True},
        "correlation_key": "o-1",
        "reason": "approved by finance",
        **command,
    }
    return signal_accept(identity=engine.identity, instance_id=instance.id, command=body, idempotency_key=key)


def _step(instance, key="approve"):
    return Step.objects.get(instance=instance, key=key)


def test_accepting_a_signal_stores_it_pending_with_its_audit_and_inbox_record(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    receipt = _signal(engine, instance, "s1", evidence_ref="ticket:1")
    signal = Signal.objects.get()
    assert signal.state == "PENDING" and signal.target_step_key == "approve" and signal.evidence_ref == "ticket:1"
    operation = SignalOperation.objects.get()
    assert operation.action == "workflow.signal" and operation.before is None
    assert operation.after["signal_id"] == signal.id and operation.after["state"] == "PENDING"
    assert InboxRecord.objects.get(source_kind="SIGNAL").source_id == signal.id
    assert _signal(engine, instance, "s1", evidence_ref="ticket:1").data == receipt.data
    assert Signal.objects.count() == 1


@pytest.mark.parametrize(
    ("command", "field"),
    [
        ({"target_step_key": "charge"}, "target_step_key"),
        ({"target_step_key": "$root"}, "target_step_key"),
        ({"target_step_key": "ghost"}, "target_step_key"),
        ({"reason": "  "}, "reason"),
        ({"evidence_ref": "has space"}, "evidence_ref"),
        ({"target_activation_sequence": 0}, "target_activation_sequence"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_signal_is_refused_with_its_field_and_nothing_is_stored(engine, command, field):
    instance = engine.start(engine.define([APPROVAL, task_step("charge")]), {"order": "o-1"})
    with pytest.raises(InvalidArgument) as caught:
        _signal(engine, instance, "bad", **command)
    assert caught.value.field == field
    assert not Signal.objects.exists() and not SignalOperation.objects.exists()
    assert not InboxRecord.objects.exists()


def test_a_matching_signal_satisfies_the_wait_and_the_step_succeeds_with_its_payload(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    _signal(engine, instance, "s1")
    engine.settle()
    signal, step = Signal.objects.get(), _step(instance)
    wait = Wait.objects.get(step=step)
    assert (wait.state, wait.winner_signal_id) == ("SATISFIED", signal.id)
    assert (signal.state, signal.consumed_wait_id, signal.disposition) == ("CONSUMED", wait.id, "APPLIED")
    assert step.state == "SUCCEEDED" and step.output == '{"approved":true}'
    assert engine.reload(instance).state == InstanceState.SUCCEEDED


def test_a_signal_with_a_wrong_version_is_rejected_and_the_wait_unchanged(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    _signal(engine, instance, "s1", payload_version="v2", target_step_key="approve")
    engine.settle()
    assert InboxRecord.objects.get().disposition == Disposition.REJECTED
    assert Signal.objects.get().state == "REJECTED"
    assert Wait.objects.get().state == "WAITING" and _step(instance).state == "WAITING"


def test_an_early_signal_is_buffered_and_the_oldest_wins_when_the_wait_appears(engine):
    definition = engine.define([task_step("charge"), {**APPROVAL, "after": ["charge"]}])
    instance = engine.start(definition, {"order": "o-1"})
    _signal(engine, instance, "s1", payload={"approved": True, "n": 1})
    with clock.moved(dt.timedelta(seconds=1)):
        _signal(engine, instance, "s2", payload={"approved": True, "n": 2})
    engine.settle()
    assert set(InboxRecord.objects.filter(source_kind="SIGNAL").values_list("disposition", flat=True)) == {"BUFFERED"}
    assert set(Signal.objects.values_list("state", flat=True)) == {"PENDING"}
    engine.work()
    engine.settle()
    first, second = Signal.objects.order_by("accepted_at")
    assert (first.state, second.state) == ("CONSUMED", "PENDING")
    assert _step(instance).output == '{"approved":true,"n":1}'


def test_a_signal_breaking_the_contract_puts_wait_step_and_instance_in_review(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    _signal(engine, instance, "s1", payload={"nope": 1})
    engine.settle()
    assert InboxRecord.objects.get().disposition == Disposition.CONTRACT_VIOLATION
    signal, wait, step = Signal.objects.get(), Wait.objects.get(), _step(instance)
    assert (signal.state, wait.state, step.state) == ("REJECTED", "NEEDS_REVIEW", "NEEDS_REVIEW")
    assert Activation.objects.get(step=step).state == "NEEDS_REVIEW"
    instance.refresh_from_db()
    assert instance.state == InstanceState.NEEDS_REVIEW and instance.deadline_at is None
    assert wait.deadline_at > clock.now()


def test_a_wait_past_its_deadline_expires_and_the_step_needs_review(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    with clock.moved(dt.timedelta(seconds=601)):
        engine.settle()
        _signal(engine, instance, "late")
        engine.settle()
    assert Wait.objects.get().state == "EXPIRED" and _step(instance).state == "NEEDS_REVIEW"
    assert Signal.objects.get().state == "PENDING"  # buffered: no waiting wait
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW


def test_a_buffered_signal_past_its_expiry_becomes_expired(engine):
    definition = engine.define([task_step("charge"), {**APPROVAL, "after": ["charge"], "signal_ttl_seconds": 30}])
    instance = engine.start(definition, {"order": "o-1"})
    _signal(engine, instance, "s1")
    engine.settle()
    with clock.moved(dt.timedelta(seconds=31)):
        engine.settle()
    assert Signal.objects.get().state == "EXPIRED"


def test_signals_for_a_finished_instance_are_refused(engine):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    _signal(engine, instance, "s1")
    engine.settle()
    with pytest.raises(FailedPrecondition):
        _signal(engine, instance, "s2")


def test_an_instance_whose_input_lacks_the_correlation_field_does_not_start(engine):
    definition = engine.define([APPROVAL])
    with pytest.raises(InvalidArgument) as caught:
        engine.start(definition, {"other": 1})
    assert caught.value.field == "input.order"


TIMER = {"key": "cool", "kind": "TIMER", "duration_seconds": 60, "max_lateness_seconds": 30}


def test_a_timer_fires_at_fire_at_with_a_null_output(engine):
    instance = engine.start(engine.define([TIMER]))
    engine.settle()
    wait = Wait.objects.get()
    started = Activation.objects.get(pk=wait.activation_id).created_at
    assert wait.fire_at == started + dt.timedelta(seconds=60)
    assert wait.deadline_at == started + dt.timedelta(seconds=3660)
    engine.settle()
    assert Wait.objects.get().state == "WAITING"
    with clock.moved(dt.timedelta(seconds=61)):
        engine.settle()
    step = _step(instance, "cool")
    assert step.state == "SUCCEEDED" and step.output == "null"
    assert engine.reload(instance).state == InstanceState.SUCCEEDED


def test_a_timer_first_seen_past_its_lateness_goes_to_review_and_a_rearmed_one_fires(engine):
    instance = engine.start(engine.define([TIMER]))
    engine.settle()
    with clock.moved(dt.timedelta(seconds=120)):
        engine.settle()
        old_wait = Wait.objects.get()
        step = _step(instance, "cool")
        assert (old_wait.state, step.state) == ("NEEDS_REVIEW", "NEEDS_REVIEW")
        assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
        with transaction.atomic():  # what RearmWait leaves behind: generation 2, same fire_at and deadline
            activation = Activation.objects.create(
                step=step, instance=instance, sequence=2, input="{}", state="WAITING"
            )
            wait = Wait.objects.create(
                instance=instance,
                step=step,
                activation=activation,
                kind="TIMER",
                generation=2,
                fire_at=old_wait.fire_at,
                deadline_at=old_wait.deadline_at,
            )
            activation.wait = wait
            activation.save()
            Step.objects.filter(pk=step.id).update(
                current_activation=activation, state="WAITING", revision=step.revision + 1
            )
            type(instance).objects.filter(pk=instance.id).update(revision=instance.revision + 5)
        engine.settle()
        assert Wait.objects.get(pk=wait.id).state == "SATISFIED"
        assert _step(instance, "cool").state == "SUCCEEDED"


@pytest.mark.parametrize(
    "corrupt",
    [{"source_id": "0" * 32}, {"source_kind": "RESULT_EVENT"}],
    ids=["its signal missing", "named as a result event"],
)
def test_a_signal_record_whose_source_is_not_its_signal_is_quarantined(engine, corrupt):
    instance = engine.start(engine.define([APPROVAL]), {"order": "o-1"})
    engine.settle()
    _signal(engine, instance, "s1")
    InboxRecord.objects.update(**corrupt)
    engine.settle()
    record = InboxRecord.objects.get()
    assert record.state == "QUARANTINED" and record.quarantine_reason
    assert _step(instance).state != "SUCCEEDED"
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
