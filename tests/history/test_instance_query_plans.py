"""On MariaDB, every filter of the instance query and the review summary read along one of the instance indexes."""

import datetime as dt

import pytest
from django.db import connection

from core.identity import Identity
from history.models import InstanceState, ReviewCause, StopKind, WorkflowInstance
from history.selectors import instance_list
from history.selectors.instance_list import InstanceQuery
from tests.factories import WorkflowDefinitionFactory, task_step
from tests.plans import MARIADB_PLANS

pytestmark = MARIADB_PLANS

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
OURS = {index.name for index in WorkflowInstance._meta.indexes}
QUERIES = {
    "none": InstanceQuery(),
    "state": InstanceQuery(states=("NEEDS_REVIEW",)),
    "states": InstanceQuery(states=("FAILED", "RUNNING")),
    "review_cause": InstanceQuery(review_causes=("wait_expired",)),
    "review_cause by review_since": InstanceQuery(review_causes=("wait_expired",), order="review_since"),
    "definition": InstanceQuery(definition="pay"),
    "definition and version": InstanceQuery(definition="pay", version=2),
    "business_key": InstanceQuery(business_key="order-77"),
    "business_key_prefix": InstanceQuery(business_key_prefix="order-77"),
    "paused": InstanceQuery(paused=True),
    "stop_kind": InstanceQuery(stop_kind="CANCEL"),
    "queue": InstanceQuery(queue="shipping"),
    "created range": InstanceQuery(created_after=T0, created_before=T0 + dt.timedelta(hours=1)),
    "updated range": InstanceQuery(updated_after=T0, updated_before=T0 + dt.timedelta(hours=1)),
    "in_review_longer_than": InstanceQuery(in_review_longer_than=60),
    "order created_at": InstanceQuery(order="created_at"),
    "state by created_at": InstanceQuery(states=("RUNNING",), order="created_at"),
    "order review_since": InstanceQuery(order="review_since"),
    "state, definition, review_since": InstanceQuery(states=("NEEDS_REVIEW",), definition="ship", order="review_since"),
}


@pytest.fixture
def identity(tenancy):
    """A namespace of 3 000 instances spread over states, causes, definitions and times, analysed."""
    namespace = tenancy[0]
    definitions = [
        WorkflowDefinitionFactory(namespace=namespace, name="pay", version=1),
        WorkflowDefinitionFactory(namespace=namespace, name="pay", version=2),
        WorkflowDefinitionFactory(namespace=namespace, name="ship", spec={"steps": [task_step("p", queue="shipping")]}),
    ]
    states = [InstanceState.SUCCEEDED] * 90 + [InstanceState.RUNNING] * 5 + [InstanceState.FAILED] * 3
    states += [InstanceState.NEEDS_REVIEW, InstanceState.CANCELLED]
    causes = list(ReviewCause.values)
    rows = []
    for i in range(3000):
        state = states[i % len(states)]
        review = state == InstanceState.NEEDS_REVIEW
        when = T0 + dt.timedelta(seconds=i)
        rows.append(
            WorkflowInstance(
                namespace_id=namespace.id,
                definition_id=definitions[i % 3].id,
                business_key=f"order-{i}",
                state=state,
                paused=state == InstanceState.RUNNING and i % 2 == 0,
                stop_kind=StopKind.CANCEL if state == InstanceState.CANCELLED else None,
                input="{}",
                review_cause=causes[i % len(causes)] if review else "",
                review_since=when if review else None,
                created_at=when,
                updated_at=when,
            )
        )
    WorkflowInstance.objects.bulk_create(rows)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {WorkflowInstance._meta.db_table}")
        cursor.fetchall()
    return Identity(namespace_id=namespace.id, actor_id="a" * 32, scopes=frozenset(), queues=None)


def _plan(queryset) -> list[dict]:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _instance_reads(plan: list[dict]) -> list[dict]:
    # Union results and derived tables are MariaDB's own rows, not reads of a table.
    return [row for row in plan if row["table"] and not row["table"].startswith("<")]


@pytest.mark.parametrize("name", list(QUERIES))
def test_every_filter_of_the_instance_query_reads_along_one_of_the_instance_indexes(identity, name):
    scans, _ = instance_list.instance_keys(identity=identity, query=QUERIES[name], after=None, limit=20)
    reads = _instance_reads(_plan(instance_list.combined(scans, order=QUERIES[name].order)))
    assert reads and all(row["key"] in OURS for row in reads), reads


def test_the_review_summary_counts_from_its_index_alone(identity):
    for queryset in instance_list.review_summary_queries(identity=identity):
        reads = _instance_reads(_plan(queryset))
        assert [row["key"] for row in reads] == ["instance_ns_review_summary"], reads
        assert all("Using index" in (row["Extra"] or "") for row in reads), reads
