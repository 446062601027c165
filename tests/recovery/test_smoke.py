import pytest

from recovery.operations import instance_continue, poll_continue, step_resolve, step_retry, task_review, wait_rearm
from tests.recovery import requests as rq
from tests.recovery import states

pytestmark = pytest.mark.django_db


def test_smoke_review(tenancy, recoverer):
    s = states.task_unknown_state(tenancy)
    states.assert_invariants(s)
    r = task_review(identity=recoverer, instance_id=s.instance.id, idempotency_key="k1", command=rq.review(s))
    print(r.text)
    states.assert_invariants(s)


def test_smoke_retry(tenancy, recoverer):
    s = states.task_failed_state(tenancy, attempts_used=2)
    states.assert_invariants(s)
    r = step_retry(identity=recoverer, instance_id=s.instance.id, idempotency_key="k1", command=rq.retry(s))
    print(r.text)
    states.assert_invariants(s)
    r = instance_continue(identity=recoverer, instance_id=s.instance.id, idempotency_key="k2", command=rq.continue_(s))
    print(r.text)
    states.assert_invariants(s)


def test_smoke_resolve(tenancy, recoverer):
    s = states.task_reviewed_state(tenancy)
    states.assert_invariants(s)
    r = step_resolve(identity=recoverer, instance_id=s.instance.id, idempotency_key="k1", command=rq.resolve(s))
    print(r.text)
    states.assert_invariants(s)


def test_smoke_poll(tenancy, recoverer):
    s = states.poll_round_failed_state(tenancy)
    states.assert_invariants(s)
    r = step_retry(identity=recoverer, instance_id=s.instance.id, idempotency_key="k1", command=rq.retry(s))
    print(r.text)
    states.assert_invariants(s)
    s = states.poll_pending_reviewed_state(tenancy)
    states.assert_invariants(s)
    r = poll_continue(identity=recoverer, instance_id=s.instance.id, idempotency_key="k2", command=rq.continue_poll(s))
    print(r.text)


def test_smoke_rearm(tenancy, recoverer):
    s = states.signal_contract_violation_state(tenancy)
    states.assert_invariants(s)
    r = wait_rearm(identity=recoverer, instance_id=s.instance.id, idempotency_key="k1", command=rq.rearm(s))
    print(r.text)
    s = states.timer_late_state(tenancy)
    r = wait_rearm(identity=recoverer, instance_id=s.instance.id, idempotency_key="k2", command=rq.rearm(s))
    print(r.text)
