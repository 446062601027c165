"""RearmWait: a new wait generation inside the original deadline."""

import datetime as dt

import pytest

from core import clock
from engine import runner
from engine.runner import runner_settle
from engine.signaling import signal_accept
from history.credentials import identity_of_credential
from history.models import (
    Activation,
    InboxRecord,
    Scope,
    Signal,
    SignalState,
    Step,
    Wait,
    WaitState,
    WorkflowInstance,
)
from recovery.consequences import operation_consequences
from recovery.eligibility import instance_eligibility
from recovery.operations import instance_continue, step_resolve, wait_rearm
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused, history_digest

pytestmark = pytest.mark.django_db
KEPT = ("kind", "signal_name", "payload_version", "correlation_key", "deadline_at", "fire_at")


def _rearm(state, identity, key="key-1"):
    receipt = rq.run(wait_rearm, identity, state, rq.rearm(state), key=key)
    activation = Activation.objects.get(pk=receipt.data["activation_id"])
    return receipt, activation, Wait.objects.get(pk=activation.wait_id)


def test_rearm_wait_creates_a_new_generation_keeping_contract_correlation_and_deadline(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy, later=())
    old = state.wait
    receipt, activation, wait = _rearm(state, recoverer)
    assert (activation.sequence, activation.state, receipt.data["activation_sequence"]) == (2, "WAITING", 2)
    assert (wait.generation, wait.state, wait.activation_id, wait.step_id) == (2, "WAITING", activation.id, old.step_id)
    assert all(getattr(wait, name) == getattr(old, name) for name in KEPT)
    assert Activation.objects.get(pk=state.activation.pk).state == "SUPERSEDED"
    assert Step.objects.get(pk=state.step.pk).current_activation_id == activation.id
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "NEEDS_REVIEW"
    states.assert_invariants(state)


def test_the_old_wait_is_superseded_and_keeps_its_winner(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    Wait.objects.filter(pk=state.wait.pk).update(winner_signal=state.signals[0])
    _rearm(state, recoverer)
    old = Wait.objects.get(pk=state.wait.pk)
    assert (old.state, old.winner_signal_id, old.generation) == (WaitState.SUPERSEDED, state.signals[0].id, 1)


def test_a_signal_buffered_in_review_is_taken_by_the_new_generation_in_rearm_waits_own_transaction(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    broken, buffered = state.signals
    record = InboxRecord.objects.get(signal_id=buffered.id)
    assert (buffered.state, record.state, record.disposition) == ("PENDING", "CONSUMED", "BUFFERED")
    receipt, activation, wait = _rearm(state, recoverer)
    # Nothing ran between the commit and these reads: the operation's own transaction took the signal.
    buffered.refresh_from_db()
    assert (wait.generation, wait.state, wait.winner_signal_id) == (2, WaitState.SATISFIED, buffered.id)
    assert (buffered.state, buffered.disposition, buffered.consumed_wait_id) == ("CONSUMED", "APPLIED", wait.id)
    assert (activation.state, activation.output) == ("SUCCEEDED", buffered.payload)
    step = Step.objects.get(pk=state.step.pk)
    assert (step.state, step.output, step.current_activation_id) == ("SUCCEEDED", buffered.payload, activation.id)
    assert Signal.objects.get(pk=broken.pk).state == SignalState.REJECTED
    instance = WorkflowInstance.objects.get(pk=state.instance.pk)
    assert instance.state == "NEEDS_REVIEW" and receipt.data["revision"] == str(instance.revision)  # review stays
    audit = state.operations().get(action="workflow.rearm_wait")
    assert audit.after["buffered_signal"] == {"id": buffered.id, "state": "CONSUMED", "disposition": "APPLIED"}
    assert audit.after["new_wait"]["winner_signal_id"] == buffered.id
    # A step the signal ended is never re-armed (re-run) again.
    assert_refused(lambda: rq.run(wait_rearm, recoverer, state, rq.rearm(state), key="again"), "FAILED_PRECONDITION")
    rq.run(instance_continue, recoverer, state, rq.continue_(state), key="continue")
    runner_settle()
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "SUCCEEDED"
    states.assert_invariants(state)


def test_the_new_generation_takes_the_oldest_buffered_signal_and_leaves_the_others_pending(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy, later=({"by": "ann"}, {"by": "bob"}, {"by": "cy"}))
    oldest, *others = state.signals[1:]
    _, _, wait = _rearm(state, recoverer)
    assert (wait.state, wait.winner_signal_id) == (WaitState.SATISFIED, oldest.id)
    assert [Signal.objects.get(pk=s.pk).state for s in others] == [SignalState.PENDING, SignalState.PENDING]
    states.assert_invariants(state)


def test_a_buffered_signal_breaking_the_contract_sends_the_new_generation_back_to_review(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy, later=({"who": 2}, {"by": "carol"}))
    broken, kept = state.signals[1:]
    _, activation, wait = _rearm(state, recoverer)
    broken.refresh_from_db()
    assert (broken.state, broken.disposition, broken.consumed_wait_id) == ("REJECTED", "CONTRACT_VIOLATION", None)
    assert (wait.generation, wait.state, wait.winner_signal_id) == (2, WaitState.NEEDS_REVIEW, None)
    assert (activation.state, Step.objects.get(pk=state.step.pk).state) == ("NEEDS_REVIEW", "NEEDS_REVIEW")
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "NEEDS_REVIEW"
    assert Signal.objects.get(pk=kept.pk).state == SignalState.PENDING
    # Re-armed once more, generation 3 takes the signal that keeps the contract.
    _, _, wait = _rearm(state, recoverer, key="again")
    assert (wait.generation, wait.state, wait.winner_signal_id) == (3, WaitState.SATISFIED, kept.id)
    states.assert_invariants(state)


def test_a_buffered_signal_aimed_at_a_later_activation_is_taken_only_by_that_one(tenancy, recoverer, issue_token):
    state = states.signal_contract_violation_state(tenancy, later=())
    client = identity_of_credential(issue_token(scopes=[Scope.WRITE]).credential)
    for sequence in (3, 2):  # the older signal aims past the new generation's activation #2
        signal_accept(
            identity=client,
            instance_id=state.instance.id,
            command={
                "name": "approved",
                "payload_version": "1",
                "payload": {"by": f"#{sequence}"},
                "correlation_key": states.INPUT["order"],
                "target_activation_sequence": sequence,
                "reason": "sent by the payment provider",
            },
            idempotency_key=f"aimed-{sequence}",
        )
    runner.pass_inbox()
    _, activation, wait = _rearm(state, recoverer)
    assert activation.sequence == 2 and wait.state == WaitState.SATISFIED
    assert Signal.objects.get(pk=wait.winner_signal_id).target_activation_sequence == 2
    assert Signal.objects.get(target_activation_sequence=3).state == SignalState.PENDING


def test_a_buffered_signal_past_its_expiry_is_never_taken_by_the_new_generation(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy, step=states.SIGNAL_STEP | {"signal_ttl_seconds": 60})
    expired = state.signals[1]
    assert expired.state == SignalState.PENDING and expired.expires_at <= clock.now()  # not marked EXPIRED yet
    _, _, wait = _rearm(state, recoverer)
    assert (wait.state, Signal.objects.get(pk=expired.pk).state) == (WaitState.WAITING, SignalState.PENDING)
    runner.pass_signal_expiry()
    assert Signal.objects.get(pk=expired.pk).state == SignalState.EXPIRED


@pytest.mark.parametrize(
    ("later", "taken"),
    [
        ([{"by": "carol"}], ("SUCCEEDED", "SATISFIED", "APPLIED", "CONSUMED")),
        ([{"who": 2}], ("NEEDS_REVIEW", "NEEDS_REVIEW", "CONTRACT_VIOLATION", "REJECTED")),
    ],
    ids=["keeps the contract", "breaks the contract"],
)
def test_the_rearm_preview_shows_the_buffered_signal_the_new_generation_takes(tenancy, recoverer, later, taken):
    state = states.signal_contract_violation_state(tenancy, later=later)
    buffered = state.signals[1]
    step_state, wait_state, disposition, signal_state = taken
    before = history_digest()
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    rows = operation_consequences(
        identity=recoverer, operation="rearm-wait", instance_id=state.instance.id, command=rq.rearm(state)
    )
    assert history_digest() == before
    preview = eligibility["steps"]["approval"]["rearm-wait"]["preview"]
    assert preview["step"]["state"] == {"before": "NEEDS_REVIEW", "after": step_state}
    assert preview["new_activation"] == {"sequence": 2, "state": step_state}
    assert preview["new_wait"]["state"] == wait_state
    assert preview["buffered_signal"]["id"] == buffered.id
    assert preview["buffered_signal"]["disposition"] == disposition
    assert preview["buffered_signal"]["state"] == {"before": "PENDING", "after": signal_state}
    assert {what: after for what, _, after in rows}["step approval activation #2"] == step_state
    _, activation, wait = _rearm(state, recoverer)  # the commit does what both previews showed
    assert (activation.state, wait.state, wait.winner_signal_id) == (
        step_state,
        wait_state,
        preview["new_wait"].get("winner_signal_id"),
    )


def test_the_rearm_preview_of_a_wait_with_nothing_buffered_shows_the_new_generation_waiting(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy, later=())
    preview = instance_eligibility(identity=recoverer, instance_id=state.instance.id)["steps"]["approval"]
    preview = preview["rearm-wait"]["preview"]
    assert preview["new_wait"] == {"generation": 2, "state": "WAITING"} and "buffered_signal" not in preview
    assert preview["step"]["state"] == {"before": "NEEDS_REVIEW", "after": "WAITING"}


def test_a_timer_keeps_its_fire_at_and_deadline(tenancy, recoverer):
    state = states.timer_late_state(tenancy)
    _, _, wait = _rearm(state, recoverer)
    assert (wait.fire_at, wait.deadline_at, wait.kind) == (state.wait.fire_at, state.wait.deadline_at, "TIMER")


def test_rearm_wait_never_extends_a_passed_deadline(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    with clock.moved(dt.timedelta(hours=3)):
        command = rq.rearm(state)
        assert_refused(lambda: rq.run(wait_rearm, recoverer, state, command), "FAILED_PRECONDITION")


def test_rearm_wait_never_reruns_a_succeeded_step(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    rq.run(step_resolve, recoverer, state, rq.resolve(state, result={"by": "alice"}), key="resolve")
    assert_refused(lambda: rq.run(wait_rearm, recoverer, state, rq.rearm(state)), "FAILED_PRECONDITION")


@pytest.mark.parametrize("build", [states.poll_pending_reviewed_state, states.task_failed_state])
def test_rearm_wait_refuses_poll_and_task_steps(tenancy, recoverer, build):
    state = build(tenancy)
    assert_refused(lambda: rq.run(wait_rearm, recoverer, state, rq.rearm(state)), "FAILED_PRECONDITION")


def test_a_wait_that_does_not_name_its_activation_back_is_corruption(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    other = states.signal_contract_violation_state(tenancy)
    Wait.objects.filter(pk=state.wait.pk).update(activation=other.activation)
    assert_refused(lambda: rq.run(wait_rearm, recoverer, state, rq.rearm(state)), "UNAVAILABLE")
