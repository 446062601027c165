"""On MariaDB, the runner's probe reads nothing of the rows that are not due: each duty's candidates are one
index range (a state, then the time it is due at; for the instances, the time the runner is due on them), so a
pass over a large history costs what is due, not what is there."""

import datetime as dt

import pytest
from django.db import connection

from core import clock
from core.ids import new_id
from engine.runner import DUE
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Continuation,
    ContinuationState,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Signal,
    Task,
    TaskState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowInstance,
)
from tests.plans import MARIADB_PLANS, analysed

pytestmark = MARIADB_PLANS

ROWS = 3000


@pytest.fixture
def history(tenancy):
    """Three thousand rows of each table a duty reads, every one in the state the duty looks for but not due yet
    (or in the state after it), half of the deadlines unset; analysed."""
    namespace = tenancy[0].id
    later = clock.now() + dt.timedelta(days=1)
    earlier = clock.now() - dt.timedelta(days=1)
    ids = [new_id() for _ in range(ROWS)]

    def sometimes(n: int):
        return later if n % 2 else None

    # A finished instance's deadline may have passed since: it is history, not due.
    WorkflowInstance.objects.bulk_create(
        WorkflowInstance(id=i, namespace_id=namespace, definition_id="d" * 32, input="{}", deadline_at=sometimes(n))
        if n % 5
        else WorkflowInstance(
            id=i,
            namespace_id=namespace,
            definition_id="d" * 32,
            input="{}",
            state=InstanceState.SUCCEEDED,
            deadline_at=earlier,
        )
        for n, i in enumerate(ids)
    )
    Task.objects.bulk_create(
        Task(
            id=i,
            namespace_id=namespace,
            application_id="a" * 32,
            queue_id="q" * 32,
            handler="h",
            input="{}",
            state=TaskState.QUEUED,
            deadline_at=sometimes(n),
            latest_start_at=sometimes(n + 1),
            source_instance_id=i,
            source_activation_id=i,
        )
        for n, i in enumerate(ids)
    )
    Attempt.objects.bulk_create(
        Attempt(task_id=i, number=1, worker="w", state=AttemptState.RUNNING, lease_expires_at=later, started_at=later)
        for i in ids
    )
    Wait.objects.bulk_create(
        Wait(
            instance_id=i,
            step_id=i,
            activation_id=i,
            kind=(WaitKind.SIGNAL, WaitKind.TIMER)[n % 2],
            signal_name="paid",
            state=WaitState.WAITING,
            deadline_at=later,
            fire_at=sometimes(n),
        )
        for n, i in enumerate(ids)
    )
    Activation.objects.bulk_create(
        Activation(
            step_id=i, instance_id=i, sequence=1, state=ActivationState.WAITING, input="{}", next_round_at=sometimes(n)
        )
        for n, i in enumerate(ids)
    )
    Signal.objects.bulk_create(
        Signal(namespace_id=namespace, workflow_id=i, name="paid", target_step_key="s", expires_at=later, actor_id="a")
        for i in ids
    )
    InboxRecord.objects.bulk_create(
        InboxRecord(instance_id=i, source_kind=InboxSource.SIGNAL, source_id=i, state=InboxState.CONSUMED) for i in ids
    )
    Continuation.objects.bulk_create(
        Continuation(instance_id=i, step_key="$root", kind="root", state=ContinuationState.APPLIED) for i in ids
    )
    with connection.cursor() as cursor:
        for model in (WorkflowInstance, Task, Attempt, Wait, Activation, Signal, InboxRecord, Continuation):
            cursor.execute(f"ANALYZE TABLE {model._meta.db_table}")
            cursor.fetchall()


def test_no_duty_reads_the_rows_that_are_not_due(history):
    now = clock.now()
    for duty, candidates in DUE.items():
        found = candidates(now)
        for rows in found if isinstance(found, tuple) else (found,):
            assert not rows.exists(), duty
            tables, report = analysed(*rows.values("pk")[:1].query.sql_with_params())
            # Not one row of 3 000: the range of what is due is empty.
            assert all((table.get("r_rows") or 0) <= 1 for table in tables), f"{duty}: {report}"


def test_the_instance_duties_read_the_instances_due_alone(history, tenancy):
    earlier = clock.now() - dt.timedelta(minutes=1)
    late, stopping = new_id(), new_id()
    WorkflowInstance.objects.bulk_create(
        [
            WorkflowInstance(
                id=late, namespace_id=tenancy[0].id, definition_id="d" * 32, input="{}", deadline_at=earlier
            ),
            WorkflowInstance(
                id=stopping,
                namespace_id=tenancy[0].id,
                definition_id="d" * 32,
                input="{}",
                state=InstanceState.CANCELLING,
            ),
        ]
    )
    now = clock.now()
    for duty, due in (("instance_deadlines", late), ("stop_settlement", stopping)):
        rows = DUE[duty](now)
        assert list(rows.values_list("pk", flat=True)) == [due], duty
        tables, report = analysed(*rows.values("pk").query.sql_with_params())
        # The range holds the two instances the runner is due on, of 3 002.
        assert all((table.get("r_rows") or 0) <= 2 for table in tables), f"{duty}: {report}"
