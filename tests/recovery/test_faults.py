"""A fault injected at any write of any operation leaves every table exactly as it was."""

import pytest
from django.db import DatabaseError, connection

from history.models import ResultEvent
from recovery.operations import task_review
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import FaultAt, history_digest


def _run_with(fault: FaultAt, service, build, state, identity):
    with connection.execute_wrapper(fault):
        return rq.run(service, identity, state, build(state))


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[c[0] for c in rq.cases()])
def test_a_fault_at_each_write_leaves_every_table_unchanged(
    tenancy, recoverer, name, service, build, make, reliability_report
):
    counted = FaultAt(0)
    _run_with(counted, service, build, make(tenancy), recoverer)
    assert len(counted.writes) >= 4, counted.writes  # receipt, rows, instance, audit at least
    for n in range(1, len(counted.writes) + 1):
        state = make(tenancy)
        command = build(state)
        before = history_digest()
        with pytest.raises(DatabaseError, match=f"injected fault at write {n}"), connection.execute_wrapper(FaultAt(n)):
            rq.run(service, recoverer, state, command, key=f"fault-{n}")
        assert history_digest() == before, (name, n, counted.writes[n - 1])
        reliability_report("faults injected, every table restored", {"operation writes": 1})


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="a committed-mode rollback is what MariaDB must prove")
def test_a_failing_result_stream_write_rolls_back_a_committed_review(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    counted = FaultAt(0)
    _run_with(counted, task_review, rq.review, states.task_unknown_state(tenancy), recoverer)
    before = history_digest()
    with pytest.raises(DatabaseError), connection.execute_wrapper(FaultAt(len(counted.writes))):
        rq.run(task_review, recoverer, state, rq.review(state), key="fault")
    assert history_digest() == before
    assert not state.operations().exists()
    assert ResultEvent.objects.filter(task=state.task).count() == 1


@pytest.mark.django_db
def test_the_digest_sees_any_changed_column(tenancy):
    state = states.task_failed_state(tenancy)
    before = history_digest()
    assert history_digest() == before
    state.task.priority += 1
    state.task.save(update_fields=["priority"])
    assert history_digest() != before
