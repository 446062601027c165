"""RearmWait: a new wait generation inside the original deadline."""

import datetime as dt

import pytest

from core import clock
from history.models import Activation, Signal, SignalState, Step, Wait, WaitState, WorkflowInstance
from recovery.operations import step_resolve, wait_rearm
from tests import states
from tests.recovery import requests as rq
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db
KEPT = ("kind", "signal_name", "payload_version", "correlation_key", "deadline_at", "fire_at")


def _rearm(state, identity):
    receipt = rq.run(wait_rearm, identity, state, rq.rearm(state))
    activation = Activation.objects.get(pk=receipt.data["activation_id"])
    return receipt, activation, Wait.objects.get(pk=activation.wait_id)


def test_rearm_wait_creates_a_new_generation_keeping_contract_correlation_and_deadline(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
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


def test_unconsumed_signals_stay_pending_for_the_new_generation(tenancy, recoverer):
    state = states.signal_contract_violation_state(tenancy)
    _rearm(state, recoverer)
    assert [Signal.objects.get(pk=s.pk).state for s in state.signals] == [SignalState.REJECTED, SignalState.PENDING]


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
