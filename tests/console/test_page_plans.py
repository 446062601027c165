"""On MariaDB, every query behind the console's pages and the instance query reads a bounded number of rows,
whatever the size of the tables: each read through ANALYZE (the server's own count of the rows it examined),
over a namespace of thousands of instances, tasks and audits of which a few dozen are in review. A page whose
plan turns into a scan, a join driven from the wrong table or a sort of a whole range examines the thousands
and fails here, on a small database, before it costs seconds at a million."""

import datetime as dt
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from console import audit
from console.admins.base import CappedCountPaginator
from core.ids import new_id
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Operator,
    ResultEvent,
    ResultKind,
    ReviewCause,
    Scope,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    WorkflowInstance,
    WorkflowOperation,
)
from testkit import states
from testkit.histories import retry_chain_state
from tests.conftest import bearer
from tests.plans import MARIADB_PLANS, analysed

pytestmark = MARIADB_PLANS

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ROWS = 3000  # of each padded table: far more than any page reads
IN_REVIEW = 30  # the review backlog among them: what the queue's counts may read
CAP = 100  # the changelists' capped count, lowered so that counting to it stays far below ROWS
ACTIONS = ("workflow.pause", "workflow.resume", "workflow.cancel", "workflow.retry_step", "workflow.continue")
BATCH = 500  # an export's batch, lowered as CAP is
# Rows one query may examine: a page of 50 and the rows it names, the capped count (a record list's: two pages,
# the instance or task of each, its instance for a user of named queues, and the derived table they fill), the
# review backlog.
BOUND = 500


@pytest.fixture
def fleet(tenancy, issue_token):
    """A namespace of ROWS instances (IN_REVIEW of them in review), tasks and workflow audits beside two real
    instances in review, analysed; an operator's login and a reader's token."""
    namespace, application, queues = tenancy
    failed = states.task_failed_state(tenancy)
    unknown = states.task_unknown_state(tenancy)
    definitions = [failed.definition.id, unknown.definition.id]
    instances = [new_id() for _ in range(ROWS)]
    WorkflowInstance.objects.bulk_create(
        WorkflowInstance(
            id=instance_id,
            namespace_id=namespace.id,
            definition_id=definitions[n % 2],
            business_key=f"order-{n:05}",
            input="{}",
            state=InstanceState.NEEDS_REVIEW if n < IN_REVIEW else InstanceState.SUCCEEDED,
            review_cause=ReviewCause.TASK_FAILED_BUDGET_LEFT if n < IN_REVIEW else "",
            review_since=T0 if n < IN_REVIEW else None,
            paused=n % 50 == 0,
            created_at=T0 + dt.timedelta(seconds=n),
            updated_at=T0 + dt.timedelta(seconds=n),
        )
        for n, instance_id in enumerate(instances)
    )
    Task.objects.bulk_create(
        Task(
            namespace_id=namespace.id,
            application_id=application.id,
            queue_id=queues[0].id,
            handler="charge_card",
            input="{}",
            state=TaskState.SUCCEEDED,
            max_attempts=1,
            attempt_count=1,
            source_instance_id=instance_id,
            source_activation_id=new_id(),
            created_at=T0 + dt.timedelta(seconds=n),
            updated_at=T0 + dt.timedelta(seconds=n),
        )
        for n, instance_id in enumerate(instances)
    )
    WorkflowOperation.objects.bulk_create(
        WorkflowOperation(
            namespace_id=namespace.id,
            workflow_id=instance_id,
            actor_id="a" * 32,
            action=ACTIONS[n % len(ACTIONS)],
            reason=f"maintenance {n}",
            evidence_ref=f"OPS-{n}",
            created_at=T0 + dt.timedelta(seconds=n),
        )
        for n, instance_id in enumerate(instances)
    )
    _long_history_first(tenancy)
    _records(instances[IN_REVIEW:])
    with connection.cursor() as cursor:
        # Exact statistics, the same every run: the engine-independent ones MariaDB prefers over InnoDB's, which
        # sample a few random pages.
        for model in (WorkflowInstance, Task, WorkflowOperation, Activation, InboxRecord, *RECORDS):
            cursor.execute(f"ANALYZE TABLE {model._meta.db_table} PERSISTENT FOR ALL")
            cursor.fetchall()
    user = User.objects.create_user("olga", password="pw", is_staff=True, is_superuser=True)
    Operator.objects.create(user=user, namespace=namespace, actor_id="o" * 32, queue_access="*")
    client = Client()
    client.force_login(user)
    token = issue_token(scopes=[Scope.READ, Scope.AUDIT_READ]).token
    return client, token, failed


def _long_history_first(tenancy) -> None:
    """The oldest review on the home: a step retried ROWS times, its counters kept as the engine keeps them, and an
    instance whose inbox consumed ROWS records. The page's checks on it seek the ends of both, never walk them."""
    state = retry_chain_state(tenancy, ROWS)
    Step.objects.filter(pk=state.steps["charge"].pk).update(activation_count=ROWS, attempts_before=ROWS - 1)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(review_since=T0 - dt.timedelta(days=1))
    InboxRecord.objects.bulk_create(
        InboxRecord(
            instance=state.instance, source_kind=InboxSource.SIGNAL, source_id=new_id(), state=InboxState.CONSUMED
        )
        for _ in range(ROWS)
    )


RECORDS = (Gate, Step, Attempt, ResultEvent)


def _records(instances: list[str]) -> None:
    """The engine's records of finished instances beside the backlog: a gate, a step, an activation and their
    task's attempt and result event each, a fifth of each table in the state (or of the kind) a console filter
    picks: more rows than BOUND, so that a list sorting or scanning them all fails."""
    tasks = dict(Task.objects.filter(source_instance_id__in=instances).values_list("source_instance_id", "id"))
    steps = [new_id() for _ in instances]
    Gate.objects.bulk_create(Gate(instance_id=instance, open=n % 5 != 0) for n, instance in enumerate(instances))
    Step.objects.bulk_create(
        Step(
            id=step,
            instance_id=instance,
            key="work",
            kind=StepKind.TASK if n % 5 == 1 else StepKind.ROOT,
            state=StepState.FAILED if n % 5 == 2 else StepState.SUCCEEDED,
        )
        for n, (step, instance) in enumerate(zip(steps, instances, strict=True))
    )
    Activation.objects.bulk_create(
        Activation(
            step_id=step,
            instance_id=instance,
            sequence=1,
            input="{}",
            state=ActivationState.NEEDS_REVIEW if n % 5 == 3 else ActivationState.SUCCEEDED,
            created_at=T0 + dt.timedelta(seconds=n),
        )
        for n, (step, instance) in enumerate(zip(steps, instances, strict=True))
    )
    unknown = [n % 5 == 4 for n in range(len(instances))]
    Attempt.objects.bulk_create(
        Attempt(
            task_id=tasks[instance],
            number=1,
            worker="w",
            state=AttemptState.UNKNOWN if lost else AttemptState.SUCCEEDED,
        )
        for instance, lost in zip(instances, unknown, strict=True)
    )
    ResultEvent.objects.bulk_create(
        ResultEvent(
            task_id=tasks[instance],
            seq=1,
            kind=ResultKind.UNKNOWN if lost else ResultKind.RESULT,
            task_revision=3,
        )
        for instance, lost in zip(instances, unknown, strict=True)
    )


def _heaviest(get) -> list[tuple[float, str]]:
    """Each SELECT a request ran (its streamed body read to the end), with the rows it examined, the most first."""
    with CaptureQueriesContext(connection) as queries:
        answer = get()
        if answer.streaming:
            b"".join(answer.streaming_content)
    assert answer.status_code == 200, answer.content[:500]
    found = []
    for query in queries.captured_queries:
        sql = query["sql"]
        if sql.lstrip().upper().startswith("SELECT"):
            # The rows examined, over every table read and every time it was read.
            tables, _ = analysed(sql)
            found.append((sum((t.get("r_rows") or 0) * (t.get("r_loops") or 0) for t in tables), sql))
    return sorted(found, key=lambda item: -item[0])


def _pages(failed) -> dict[str, str]:
    instance = failed.instance.id
    since = urlencode({"since": str(T0 + dt.timedelta(days=1))})[len("since=") :]  # as the filter's own links
    changelist = "/admin/history/workflowinstance/"
    return {
        "home": "/admin/",
        "instances": changelist,
        "instances in review": f"{changelist}?state__exact=NEEDS_REVIEW",
        "instances by cause": f"{changelist}?review_cause__exact=task_failed_budget_left",
        "instances paused": f"{changelist}?paused__exact=1",
        "instances by stop": f"{changelist}?stop_kind__exact=CANCEL",
        "instances updated since": f"{changelist}?updated_at__gte={since}",
        "instances created since": f"{changelist}?created_at__gte={since}",
        "instances searched": f"{changelist}?q=order-0001",
        "instances by definition (not sortable)": f"{changelist}?o=1",
        "instances by cause (not sortable)": f"{changelist}?o=4",
        "instances by review age": f"{changelist}?o=5",
        "instances by review age, newest": f"{changelist}?o=-5",
        "instances oldest updated": f"{changelist}?o=6",
        "instances by a column there is not": f"{changelist}?o=9.x",
        "instance page": f"{changelist}{instance}/change/",
        "tasks": "/admin/history/task/",
        "workflow audit": "/admin/history/workflowoperation/",
        "workflow audit by action": "/admin/history/workflowoperation/?action=workflow.resume",
        "signal audit": "/admin/history/signaloperation/",
        "execution audit": "/admin/history/executionaudit/",
        "gates": "/admin/history/gate/",
        "gates shut": "/admin/history/gate/?open__exact=0",
        "steps": "/admin/history/step/",
        "steps failed": "/admin/history/step/?state__exact=FAILED",
        "steps of a kind": "/admin/history/step/?kind__exact=TASK",
        "activations": "/admin/history/activation/",
        "activations in review": "/admin/history/activation/?state__exact=NEEDS_REVIEW",
        "attempts": "/admin/history/attempt/",
        "attempts unknown": "/admin/history/attempt/?state__exact=UNKNOWN",
        "result events": "/admin/history/resultevent/",
        "result events unknown": "/admin/history/resultevent/?kind__exact=UNKNOWN",
        "inbox records consumed": "/admin/history/inboxrecord/?state__exact=CONSUMED",
    }


@pytest.mark.parametrize("queues", ["*", ["payments"]], ids=["every queue", "named queues"])
def test_every_console_page_reads_a_bounded_number_of_rows(fleet, monkeypatch, queues):
    client, token, failed = fleet
    Operator.objects.filter(user__username="olga").update(queue_access=queues)
    monkeypatch.setattr(CappedCountPaginator, "CAP", CAP)
    report = {}
    for name, url in _pages(failed).items():
        heaviest = _heaviest(lambda url=url: client.get(url))
        report[name] = heaviest[0] if heaviest else (0, "")
    over = {name: f"{rows:.0f} rows: {sql[:600]}" for name, (rows, sql) in report.items() if rows > BOUND}
    assert not over, "\n\n".join(f"{name}: {text}" for name, text in over.items())


def test_an_export_reads_each_batch_from_where_the_last_ended(fleet, monkeypatch):
    client, token, failed = fleet
    monkeypatch.setattr(audit, "EXPORT_BATCH", BATCH)
    monkeypatch.setattr(CappedCountPaginator, "CAP", CAP)  # the list's own page, built on the way
    heaviest = _heaviest(lambda: client.get("/admin/history/workflowoperation/export/jsonl/"))
    # Every audit row in ROWS / BATCH batches, none of which reads the rows before it again.
    assert len([sql for _, sql in heaviest if "history_workflowoperation" in sql]) >= ROWS // BATCH
    rows, sql = heaviest[0]
    assert rows <= 2 * BATCH, f"{rows:.0f} rows: {sql[:600]}"


def test_the_instance_query_and_the_timeline_read_a_bounded_number_of_rows(fleet):
    client, token, failed = fleet
    api = APIClient()
    api.credentials(**bearer(token))
    instance = failed.instance.id
    over = {}
    for url in (
        "/v1/workflows",
        "/v1/workflows?state=NEEDS_REVIEW",
        "/v1/workflows?business_key_prefix=order-0001",
        f"/v1/workflows/{instance}/events",
        f"/v1/workflows/{instance}/operations",
    ):
        rows, sql = _heaviest(lambda url=url: api.get(url))[0]
        if rows > BOUND:
            over[url] = f"{rows:.0f} rows: {sql[:600]}"
    assert not over, "\n\n".join(f"{url}: {text}" for url, text in over.items())


def test_the_queue_version_the_home_polls_reads_one_index_alone(fleet):
    # The version counts the instances in review, sums their revisions and takes the latest change: from the
    # index's entries alone, never a row of the table (12 500 random reads of a cold pool at 1M, 1.3 s).
    client, token, failed = fleet
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/admin/").status_code == 200
    version = [
        query["sql"] for query in queries.captured_queries if "SUM(" in query["sql"] and "`revision`" in query["sql"]
    ]
    assert len(version) == 1, version
    tables, report = analysed(version[0])
    assert [(t["table_name"], t.get("key"), t.get("using_index")) for t in tables] == [
        (WorkflowInstance._meta.db_table, "instance_ns_state_updated", True)
    ], report


def test_the_queue_reads_its_oldest_reviews_from_a_range_of_the_review_index(fleet):
    # The longest waiting first: a range of (namespace, state, review_since). On (namespace, review_since) MariaDB
    # took a ref on the namespace with the rest as an index condition, walking every instance outside review before
    # the first in review (1 126 index pages for a page of 26 at 1M, 57 ms cold); the rows it counts stay 26.
    client, token, failed = fleet
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/admin/").status_code == 200
    oldest = [
        query["sql"]
        for query in queries.captured_queries
        if "ORDER BY `history_workflowinstance`.`review_since`" in query["sql"]
    ]
    assert oldest, [query["sql"][:200] for query in queries.captured_queries]
    for sql in oldest:
        tables, report = analysed(sql)
        assert [(t.get("key"), t.get("access_type"), t.get("used_key_parts")) for t in tables] == [
            ("instance_ns_state_since", "range", ["namespace_id", "state", "review_since"])
        ], report
