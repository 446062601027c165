"""On MariaDB, a claim reads the head of its queue, not its backlog: the candidates' query walks the queue's
claim-order index and stops at its limit, whatever the number of queued tasks behind it."""

import datetime as dt

from django.db import connection

from core import clock
from core.ids import new_id
from engine.worker import CLAIM_CANDIDATES, claim_candidates
from history.models import Gate, Task, TaskState
from tests.plans import MARIADB_PLANS, analysed

pytestmark = MARIADB_PLANS

ROWS = 3000
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_the_claims_candidates_are_the_head_of_the_queues_claim_order_index(tenancy):
    namespace, application, (queue,) = tenancy
    instances = [new_id() for _ in range(ROWS)]
    Gate.objects.bulk_create(Gate(instance_id=i, open=True) for i in instances)
    Task.objects.bulk_create(
        Task(
            namespace_id=namespace.id,
            application_id=application.id,
            queue_id=queue.id,
            handler="h",
            input="{}",
            state=TaskState.QUEUED,
            priority=n % 3,  # the head of the order is spread over the whole backlog by age
            source_instance_id=i,
            source_activation_id=new_id(),
            created_at=T0 + dt.timedelta(seconds=n),
        )
        for n, i in enumerate(instances)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {Task._meta.db_table}")
        cursor.fetchall()
    candidates = claim_candidates(namespace.id, queue.name, clock.now())[:CLAIM_CANDIDATES]
    priorities = dict(Task.objects.values_list("id", "priority"))
    rows = list(candidates)
    assert [priorities[task_id] for task_id, _, _ in rows] == [2] * CLAIM_CANDIDATES
    tables, report = analysed(*candidates.query.sql_with_params())
    (task,) = [table for table in tables if table["table_name"] == Task._meta.db_table]
    assert task["key"] == "task_queue_claim_order", report
    assert task["r_rows"] <= CLAIM_CANDIDATES, report  # the limit's worth, of 3 000 queued
    assert "filesort" not in report, report
