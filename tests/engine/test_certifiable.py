"""Every guarded decision is certifiable on a Galera cluster: each transaction that writes also writes the rows
it locked as guards (the rule and its check: ``tests/certify.py``), across the engine's background, the
workers, signals, control and every recovery operation, proposals included."""

import pytest
from django.db import connection, transaction

from history.credentials import identity_of_credential
from history.locking import Level, LockSet
from history.models import ApprovalPolicy, Namespace, Scope
from recovery.proposals import proposal_approve, proposal_reject
from tests.certify import write_sets_checked
from tests.engine import test_concurrency
from tests.engine.conftest import task_step
from tests.recovery import requests as rq

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="the check follows the MariaDB backend's commits"),
]


def test_a_writing_transaction_that_leaves_a_locked_guard_unwritten_is_caught(engine):
    instance = engine.start(engine.define([task_step("a")]))
    with write_sets_checked() as violations, transaction.atomic():
        LockSet().lock_one(Level.INSTANCE, instance.id)
        Namespace.objects.filter(pk=instance.namespace_id).update(name="renamed")
    assert len(violations) == 1 and violations[0].startswith("history_workflowinstance locked at ")


def test_the_background_workers_signals_and_control_write_what_they_guard(engine):
    with write_sets_checked() as violations:
        test_concurrency.test_weave_check_is_clean_after_a_mixed_concurrent_run(engine)
    assert violations == [], "\n".join(violations)


@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[case[0] for case in rq.cases()])
def test_a_recovery_operation_proposed_then_approved_or_rejected_writes_what_it_guards(
    tenancy, issue_token, name, service, build, make
):
    states = [make(tenancy) for _ in range(3)]
    proposer, approver = (
        identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id=actor * 32).credential) for actor in "ab"
    )
    with write_sets_checked() as violations:
        direct = states[0]
        service(identity=proposer, instance_id=direct.instance.id, idempotency_key="direct", command=build(direct))
        ApprovalPolicy.objects.create(namespace=tenancy[0])
        for state, decide, command in (
            (states[1], proposal_approve, {}),
            (states[2], proposal_reject, {"reason": "no"}),
        ):
            proposal = service(
                identity=proposer,
                instance_id=state.instance.id,
                idempotency_key=f"p-{state.instance.id}",
                command=build(state),
            ).data["proposal_id"]
            decide(
                identity=approver,
                instance_id=state.instance.id,
                proposal_id=proposal,
                idempotency_key=f"d-{state.instance.id}",
                command=command,
            )
    assert violations == [], "\n".join(violations)
