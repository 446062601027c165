"""Each recovery operation appends exactly its events to the instance's timeline, attributed to the caller
and its operation, in the operation's transaction.

Each event is (kind, step key, before, after, detail, actor kind).
"""

import dataclasses

import pytest
from django.db import DatabaseError, connection, transaction

from core import exactjson
from history.models import InstanceEvent
from recovery.operations import instance_continue
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import FaultAt, history_digest

pytestmark = pytest.mark.django_db

EXPECTED = {
    "review-task": [
        ("task.state", "charge", "NEEDS_REVIEW", "SUCCEEDED", "", "client"),
        ("audit.created", "charge", "", "", "task.review", "client"),
        ("audit.created", "charge", "", "", "workflow.review_task", "client"),
        ("result.created", "charge", "", "", "REVIEWED", "client"),
        ("inbox.created", "charge", "", "PENDING", "", "client"),
    ],
    "resolve-step": [
        ("activation.state", "charge", "NEEDS_REVIEW", "SUCCEEDED", "", "client"),
        ("step.state", "charge", "NEEDS_REVIEW", "SUCCEEDED", "", "client"),
        ("audit.created", "charge", "", "", "workflow.resolve_step", "client"),
    ],
    "continue-poll": [
        ("activation.state", "settle", "NEEDS_REVIEW", "WAITING", "", "client"),
        ("step.state", "settle", "NEEDS_REVIEW", "WAITING", "", "client"),
        ("audit.created", "settle", "", "", "workflow.continue_poll", "client"),
    ],
    "rearm-wait-signal": [
        ("activation.created", "approval", "", "WAITING", "", "client"),
        ("wait.created", "approval", "", "WAITING", "", "client"),
        ("wait.state", "approval", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("activation.state", "approval", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("step.state", "approval", "NEEDS_REVIEW", "WAITING", "", "client"),
        # The new generation takes the signal buffered while the wait was in review, in the same transaction.
        ("step.state", "approval", "WAITING", "SUCCEEDED", "", "client"),
        ("activation.state", "approval", "WAITING", "SUCCEEDED", "", "client"),
        ("wait.state", "approval", "WAITING", "SATISFIED", "", "client"),
        ("signal.state", "approval", "PENDING", "CONSUMED", "", "client"),
        ("audit.created", "approval", "", "", "workflow.rearm_wait", "client"),
    ],
    "rearm-wait-timer": [
        ("activation.created", "cooldown", "", "WAITING", "", "client"),
        ("wait.created", "cooldown", "", "WAITING", "", "client"),
        ("wait.state", "cooldown", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("activation.state", "cooldown", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("step.state", "cooldown", "NEEDS_REVIEW", "WAITING", "", "client"),
        ("audit.created", "cooldown", "", "", "workflow.rearm_wait", "client"),
    ],
    "continue": [
        ("instance.state", "", "NEEDS_REVIEW", "RUNNING", "", "client"),
        ("audit.created", "", "", "", "workflow.continue", "client"),
    ],
    "retry-step-task": [
        ("task.created", "charge", "", "QUEUED", "", "client"),
        ("activation.created", "charge", "", "ACTIVE", "", "client"),
        ("step.state", "charge", "FAILED", "ACTIVE", "", "client"),
        ("audit.created", "charge", "", "", "workflow.retry_step", "client"),
    ],
    "retry-step-poll": [
        ("task.created", "settle", "", "QUEUED", "", "client"),
        ("activation.created", "settle", "", "ACTIVE", "", "client"),
        ("step.state", "settle", "FAILED", "ACTIVE", "", "client"),
        ("audit.created", "settle", "", "", "workflow.retry_step", "client"),
    ],
    "retry-step-final-signal": [
        ("activation.created", "settle", "", "WAITING", "", "client"),
        ("wait.created", "settle", "", "WAITING", "", "client"),
        ("wait.state", "settle", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("activation.state", "settle", "NEEDS_REVIEW", "SUPERSEDED", "", "client"),
        ("step.state", "settle", "NEEDS_REVIEW", "WAITING", "", "client"),
        ("audit.created", "settle", "", "", "workflow.retry_step", "client"),
    ],
}
CASES = rq.cases()


def _added(seen: set[str]) -> list[InstanceEvent]:
    return [e for e in InstanceEvent.objects.order_by("sequence") if e.id not in seen]


def test_every_recovery_operation_is_listed():
    assert set(EXPECTED) == {name for name, *_ in CASES}


@pytest.mark.parametrize(("name", "service", "build", "make"), CASES, ids=[c[0] for c in CASES])
def test_each_recovery_operation_appends_exactly_its_events(tenancy, recoverer, name, service, build, make):
    state = make(tenancy)
    seen = set(InstanceEvent.objects.values_list("id", flat=True))
    receipt = exactjson.loads(rq.run(service, recoverer, state, build(state)).text)
    added = _added(seen)
    assert [(e.kind, e.step_key, e.before, e.after, e.detail, e.actor_kind) for e in added] == EXPECTED[name]
    assert {e.instance_id for e in added} == {state.instance.id}
    assert {e.actor_id for e in added} == {recoverer.actor_id}
    # The execution audit of ReviewTask carries its own operation; every other event the operation's.
    execution = receipt.get("execution_operation_id")
    assert [e.operation_id for e in added] == [
        execution if e.detail == "task.review" else receipt["operation_id"] for e in added
    ]
    sequences = list(InstanceEvent.objects.filter(instance_id=state.instance.id).values_list("sequence", flat=True))
    assert sorted(sequences) == list(range(1, len(sequences) + 1))


def test_an_operation_run_from_the_admin_is_attributed_to_the_operator(tenancy, recoverer):
    operator = dataclasses.replace(recoverer, credential_id=None)  # an admin user's identity has no credential
    state = states.task_resolved_state(tenancy)
    seen = set(InstanceEvent.objects.values_list("id", flat=True))
    rq.run(instance_continue, operator, state, rq.continue_(state))
    assert {(e.actor_kind, e.actor_id) for e in _added(seen)} == {("operator", recoverer.actor_id)}


def test_an_operation_rolled_back_at_its_last_event_leaves_no_event_and_no_change(tenancy, recoverer):
    state = states.task_resolved_state(tenancy)
    command = rq.continue_(state)
    before, events = history_digest(), InstanceEvent.objects.count()
    with transaction.atomic():
        fault = FaultAt(0)
        with connection.execute_wrapper(fault):
            rq.run(instance_continue, recoverer, state, command)
        transaction.set_rollback(True)
    last_event_write = max(n for n, sql in enumerate(fault.writes, 1) if "history_instanceevent" in sql)
    with pytest.raises(DatabaseError), connection.execute_wrapper(FaultAt(last_event_write)):
        rq.run(instance_continue, recoverer, state, command)
    assert history_digest() == before and InstanceEvent.objects.count() == events
