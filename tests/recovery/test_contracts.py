"""An operator's result is judged by the step's contract exactly as the engine judges a worker's: numbers exactly."""

import pytest

from core import exactjson
from history.models import InstanceState, Step
from recovery.consequences import operation_consequences
from recovery.operations import step_resolve
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused, history_digest

pytestmark = pytest.mark.django_db


def _money_step_in_review(tenancy) -> states.State:
    """The worker answered 0.30000000000000001, which is not a whole number of cents: the step is in review."""
    state = states.result_contract_violation_state(
        tenancy, step=states.TASK_STEP | {"contract": states.MONEY}, result='{"amount":0.30000000000000001}'
    )
    assert state.instance.state == InstanceState.NEEDS_REVIEW
    return state


def _resolve(state: states.State, amount: str) -> dict:
    return rq.resolve(state, result=exactjson.loads(f'{{"amount":{amount}}}'))


def _preview(identity, state: states.State, command: dict):
    return operation_consequences(
        identity=identity, operation="resolve-step", instance_id=state.instance.id, command=command
    )


def test_resolve_step_accepts_a_whole_number_of_cents_and_its_preview_agrees(tenancy, recoverer):
    state = _money_step_in_review(tenancy)
    command = _resolve(state, "19.99")
    before = history_digest()
    assert ("step charge", "NEEDS_REVIEW", "SUCCEEDED") in _preview(recoverer, state, command)
    assert history_digest() == before
    rq.run(step_resolve, recoverer, state, command)
    assert Step.objects.get(pk=state.step.pk).output == '{"amount":19.99}'


def test_resolve_step_refuses_an_amount_that_is_not_a_whole_number_of_cents(tenancy, recoverer):
    state = _money_step_in_review(tenancy)
    command = _resolve(state, "0.30000000000000001")
    for run in (lambda: rq.run(step_resolve, recoverer, state, command), lambda: _preview(recoverer, state, command)):
        refusal = assert_refused(run, "INVALID_ARGUMENT", field="result")
        assert refusal.message.endswith("0.30000000000000001 is not a multiple of 0.01")
