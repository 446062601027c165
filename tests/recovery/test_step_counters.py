"""The step counters equal the history after every recovery operation, and the migration fills them."""

import importlib

import pytest
from django.apps import apps

from history.models import Step
from recovery.operations.retry_step import step_retry
from testkit import requests as rq
from testkit import states
from tests.engine.test_step_counters import step_counter_drift

pytestmark = pytest.mark.django_db
CASES = rq.cases()
migration = importlib.import_module("history.migrations.0011_step_counters")


@pytest.mark.parametrize(("name", "service", "build", "make"), CASES, ids=[c[0] for c in CASES])
def test_each_recovery_operation_keeps_the_step_counters(tenancy, recoverer, name, service, build, make):
    state = make(tenancy)
    assert step_counter_drift() == []
    rq.run(service, recoverer, state, build(state))
    assert step_counter_drift() == []


def test_the_counters_of_existing_steps_are_filled_from_their_history(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    rq.run(step_retry, recoverer, state, rq.retry(state))  # a second activation, the first task's attempts before it
    counters = list(Step.objects.order_by("id").values_list("activation_count", "attempts_before"))
    assert (2, 2) in counters
    Step.objects.update(activation_count=0, attempts_before=0)
    assert step_counter_drift() != []
    migration.counters_fill(apps, None)
    assert list(Step.objects.order_by("id").values_list("activation_count", "attempts_before")) == counters
    assert step_counter_drift() == []
