"""Concurrent commands on MariaDB with real threads (SPEC §9): one effect per key, one winner per revision."""

import threading

import pytest
from django.db import connection

from history.credentials import identity_of_credential
from history.errors import WeaveError
from history.models import Activation, Scope, Task, WorkflowInstance, WorkflowOperation
from recovery.operations import instance_continue, step_retry
from tests.recovery import requests as rq
from tests.recovery import states

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="SQLite serialises writers at BEGIN: no row locks to race"),
]
THREADS = 16


def _concurrently(work) -> list:
    """Run ``work(i)`` in THREADS threads released together; each result or raised error, in order."""
    barrier = threading.Barrier(THREADS)
    results: list = [None] * THREADS

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # collected and asserted by the test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def _identities(issue_token, count: int) -> list:
    return [
        identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id=f"{i:032x}").credential)
        for i in range(count)
    ]


def test_sixteen_requests_with_one_key_make_one_retry_and_sixteen_identical_receipts(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state)
    receipts = _concurrently(lambda i: rq.run(step_retry, recoverer, state, command, key="same"))
    assert all(not isinstance(r, Exception) for r in receipts), receipts
    assert len({r.text for r in receipts}) == 1
    assert sorted(r.replayed for r in receipts) == [False] + [True] * (THREADS - 1)
    assert Task.objects.filter(source_instance=state.instance).count() == 2
    assert Activation.objects.filter(step=state.step).count() == 2
    assert WorkflowOperation.objects.filter(workflow=state.instance).count() == 1
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == states.INSTANCE_REVISION + 1
    states.assert_invariants(state)


def test_one_key_from_sixteen_credentials_serialises_on_the_operation_key(tenancy, issue_token):
    state = states.task_resolved_state(tenancy)
    command = rq.continue_(state)
    identities = _identities(issue_token, THREADS)
    receipts = _concurrently(lambda i: rq.run(instance_continue, identities[i], state, command, key="same"))
    assert all(not isinstance(r, Exception) for r in receipts), receipts
    assert len({r.text for r in receipts}) == 1 and sum(not r.replayed for r in receipts) == 1
    assert WorkflowOperation.objects.filter(workflow=state.instance).count() == 1


# The losers of a RetryStep find a newer revision; those of a Continue find the instance no longer in review.
@pytest.mark.parametrize(("operation", "refusal"), [("retry-step", "ABORTED"), ("continue", "FAILED_PRECONDITION")])
def test_sixteen_keys_on_one_revision_make_exactly_one_success(tenancy, issue_token, operation, refusal):
    if operation == "retry-step":
        state, service, build = states.task_failed_state(tenancy), step_retry, rq.retry
    else:
        state, service, build = states.task_resolved_state(tenancy), instance_continue, rq.continue_
    command = build(state)
    identities = _identities(issue_token, THREADS)
    results = _concurrently(lambda i: rq.run(service, identities[i], state, command, key=f"key-{i}"))
    successes = [r for r in results if not isinstance(r, Exception)]
    refusals = [r for r in results if isinstance(r, WeaveError)]
    assert len(successes) == 1, results
    assert len(refusals) == THREADS - 1 and {r.code for r in refusals} == {refusal}
    assert WorkflowOperation.objects.filter(workflow=state.instance).count() == 1
    states.assert_invariants(state)
