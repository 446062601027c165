"""The step counters equal the history after every recovery operation."""

import pytest

from tests.engine.test_step_counters import step_counter_drift
from tests.recovery import requests as rq

pytestmark = pytest.mark.django_db
CASES = rq.cases()


@pytest.mark.parametrize(("name", "service", "build", "make"), CASES, ids=[c[0] for c in CASES])
def test_each_recovery_operation_keeps_the_step_counters(tenancy, recoverer, name, service, build, make):
    state = make(tenancy)
    assert step_counter_drift() == []
    rq.run(service, recoverer, state, build(state))
    assert step_counter_drift() == []
