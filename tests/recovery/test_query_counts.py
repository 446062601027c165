"""A recovery operation's query count is bounded by the step's history, not by the table sizes (SPEC §9)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.recovery import requests as rq

pytestmark = pytest.mark.django_db
OTHER_INSTANCES = 50
# The measured counts (equal on SQLite and MariaDB): a regression adding per-row queries fails here.
BOUNDS = {
    "review-task": 35,
    "resolve-step": 25,
    "continue-poll": 29,
    "rearm-wait-signal": 26,
    "rearm-wait-timer": 26,
    "continue": 18,
    "retry-step-task": 34,
    "retry-step-poll": 37,
    "retry-step-final-signal": 37,
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
    for _ in range(OTHER_INSTANCES - 1):
        make(tenancy)
    many = _count(service, build, make(tenancy), recoverer, "many")
    assert few == many, (name, few, many)
    assert many <= BOUNDS[name], (name, many)
