"""A recovery operation racing the runner's inbox consumption, with real threads on MariaDB."""

import threading

import pytest
from django.db import connection, connections

from core.errors import WeaveError
from core.identity import Identity
from engine.check import invariants_check
from engine.demo import demo_run
from engine.runner import runner_settle
from history.models import Namespace, Scope, Step, Task, WorkflowInstance, WorkflowOperation
from recovery.operations import OPERATIONS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(connection.vendor != "mysql", reason="SQLite serialises writers: there is no race to run")
@pytest.mark.parametrize("attempt", range(3))
def test_a_decision_read_before_the_runner_consumed_the_inbox_never_commits(attempt):
    result = demo_run(namespace=f"race{attempt}")
    scenario = result["scenarios"]["task_unknown"]
    operator = Identity(
        namespace_id=Namespace.objects.get(name=result["namespace"]).id,
        actor_id="f" * 32,
        scopes=frozenset({Scope.RECOVER}),
        queues=None,
    )
    task = Task.objects.get(id=scenario["task_id"])
    instance = WorkflowInstance.objects.get(id=scenario["instance_id"])
    OPERATIONS["review-task"].service(
        identity=operator,
        instance_id=instance.id,
        idempotency_key=f"race-review-{attempt}",
        command={
            "expected_revision": str(instance.revision),
            "reason": "ledger checked",
            "evidence_ref": "ticket:1",
            "task_id": task.id,
            "expected_task_revision": str(task.revision),
            "execution_settled": True,
            "conclusion": "SUCCEEDED",
            "result": {"paid": True},
        },
    )
    # The operator reads the page now: the REVIEWED record is still PENDING in the inbox.
    seen = WorkflowInstance.objects.get(id=instance.id)
    step = Step.objects.get(instance_id=instance.id, key="charge")
    command = {
        "expected_revision": str(seen.revision),
        "reason": "the charge succeeded",
        "evidence_ref": "ticket:1",
        "step_key": "charge",
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
        "execution_settled": True,
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
    }
    barrier, outcome = threading.Barrier(2), {}

    def runner():
        barrier.wait()
        try:
            runner_settle()
        finally:
            connections.close_all()

    def operator_decides():
        barrier.wait()
        try:
            OPERATIONS["resolve-step"].service(
                identity=operator, instance_id=instance.id, idempotency_key=f"race-{attempt}", command=command
            )
            outcome["code"] = "OK"
        except WeaveError as error:
            outcome["code"] = error.code
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner), threading.Thread(target=operator_decides)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Either the inbox still held the record (FAILED_PRECONDITION) or the runner's commit moved the
    # revision the operator read (ABORTED): a decision on a stale view is never committed.
    assert outcome["code"] in {"FAILED_PRECONDITION", "ABORTED"}
    assert not WorkflowOperation.objects.filter(workflow_id=instance.id, action="workflow.resolve_step").exists()
    assert [str(v) for v in invariants_check()] == []
