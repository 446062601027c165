"""A recovery operation's query count is bounded, by neither the table sizes nor the step's history."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from recovery.operations import step_retry
from testkit import requests as rq
from testkit import states
from testkit.histories import poll_rounds_state, retry_chain_state

pytestmark = pytest.mark.django_db
OTHER_INSTANCES = 50
# The measured counts (equal on SQLite and MariaDB), timeline events included: a regression adding
# per-row queries fails here.
BOUNDS = {
    "review-task": 45,
    "resolve-step": 30,
    "continue-poll": 36,
    "rearm-wait-signal": 41,
    "rearm-wait-timer": 41,
    "continue": 22,
    "retry-step-task": 44,
    "retry-step-poll": 50,
    "retry-step-final-signal": 54,
}


def _count(service, build, state, identity, key) -> int:
    command = build(state)
    with CaptureQueriesContext(connection) as queries:
        rq.run(service, identity, state, command, key=key)
    return len(queries.captured_queries)


@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[c[0] for c in rq.cases()])
def test_the_query_count_does_not_grow_with_other_instances(tenancy, recoverer, name, service, build, make):
    make(tenancy)
    few = _count(service, build, make(tenancy), recoverer, "few")
    states.instances_in_review(tenancy, OTHER_INSTANCES - 1)
    many = _count(service, build, make(tenancy), recoverer, "many")
    assert few == many, (name, few, many)
    assert many <= BOUNDS[name], (name, many)


@pytest.mark.parametrize(
    ("name", "build"), [("retry-step-task", retry_chain_state), ("retry-step-poll", poll_rounds_state)]
)
def test_the_query_count_does_not_grow_with_the_step_history(tenancy, recoverer, name, build):
    # What a process reads once (the quota's application and queue by name, ``engine.quota``) is read by a first
    # retry, not counted.
    _count(step_retry, rq.retry, build(tenancy, 5), recoverer, "first")
    short = _count(step_retry, rq.retry, build(tenancy, 5), recoverer, "short")
    long = _count(step_retry, rq.retry, build(tenancy, 500), recoverer, "long")
    assert short == long, (name, short, long)
    assert long <= BOUNDS[name], (name, long)
