"""On MariaDB, each of the watchdog's reads is the start of one index range, whatever the size of what lies
behind it: the rows it examines (ANALYZE, the server's own count) stay within its limit and nothing is sorted."""

import datetime as dt

import pytest
from django.db import connection

from core.ids import new_id
from engine.watchdog import overdue_rows, paused_rows, queued_rows, retrying_rows, waiting_rows
from history.models import (
    Continuation,
    ContinuationState,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Task,
    TaskState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowInstance,
)
from tests.plans import MARIADB_PLANS, analysed

pytestmark = MARIADB_PLANS

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ROWS = 3000
LIMIT = 50
BOUND = T0 + dt.timedelta(days=1)  # every row below is older: the whole backlog qualifies


@pytest.fixture
def backlog(tenancy):
    """Three thousand of each, all older than the bounds: instances (one in twenty paused), pending inbox records
    and continuations (beside as many done), queued tasks of one queue by attempts (most of them retried five times
    or more), waits overdue (beside as many satisfied and as many expecting nothing); analysed."""
    namespace = tenancy[0].id
    at = [T0 + dt.timedelta(seconds=i) for i in range(ROWS)]
    instances = [new_id() for _ in range(ROWS)]
    WorkflowInstance.objects.bulk_create(
        WorkflowInstance(
            id=i,
            namespace_id=namespace,
            definition_id="d" * 32,
            input="{}",
            paused=n % 20 == 0,
            state=InstanceState.RUNNING,
            created_at=at[n],
            updated_at=at[n],
        )
        for n, i in enumerate(instances)
    )
    for state in (InboxState.PENDING, InboxState.CONSUMED):
        InboxRecord.objects.bulk_create(
            InboxRecord(
                instance_id=i, source_kind=InboxSource.SIGNAL, source_id=new_id(), state=state, created_at=at[n]
            )
            for n, i in enumerate(instances)
        )
    for state in (ContinuationState.PENDING, ContinuationState.APPLIED):
        Continuation.objects.bulk_create(
            Continuation(instance_id=i, step_key="$root", kind="root", state=state, created_at=at[n])
            for n, i in enumerate(instances)
        )
    Task.objects.bulk_create(
        Task(
            namespace_id=namespace,
            application_id="a" * 32,
            queue_id="q" * 32,
            handler="h",
            input="{}",
            state=TaskState.QUEUED,
            attempt_count=n % 12,
            max_attempts=20,
            source_instance_id=i,
            source_activation_id=new_id(),
            created_at=at[n],
            updated_at=at[n],
        )
        for n, i in enumerate(instances)
    )
    for state, expected in ((WaitState.WAITING, True), (WaitState.SATISFIED, True), (WaitState.WAITING, False)):
        Wait.objects.bulk_create(
            Wait(
                instance_id=i,
                step_id=new_id(),
                activation_id=new_id(),
                kind=WaitKind.SIGNAL,
                signal_name="paid",
                state=state,
                deadline_at=BOUND,
                expected_at=at[n] if expected else None,
            )
            for n, i in enumerate(instances)
        )
    with connection.cursor() as cursor:
        for model in (WorkflowInstance, InboxRecord, Continuation, Task, Wait):
            cursor.execute(f"ANALYZE TABLE {model._meta.db_table}")
            cursor.fetchall()
    return namespace


def test_each_reason_reads_the_start_of_one_index_range_however_long_the_backlog(backlog):
    # One backlog for every reason: building it is most of the test's time.
    reads = {
        "instance_ns_paused_updated": paused_rows(backlog, BOUND, LIMIT),
        "inbox_state_created": waiting_rows(InboxRecord, InboxState.PENDING, BOUND, LIMIT),
        "continuation_state_created": waiting_rows(Continuation, ContinuationState.PENDING, BOUND, LIMIT),
        "task_state_attempts": retrying_rows(5, LIMIT),
        "task_queue_claim_order": queued_rows("q" * 32, LIMIT),
        "wait_state_expected": overdue_rows(BOUND, LIMIT),
    }
    for index, queryset in reads.items():
        assert len(list(queryset)) == LIMIT, index  # the backlog is longer than one read
        (table,), report = analysed(*queryset.query.sql_with_params())
        assert table["key"] == index, report
        # The rows the server examined: the limit's worth.
        assert table["r_rows"] <= LIMIT, report
        assert "filesort" not in report, report
