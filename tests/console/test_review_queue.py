"""The console's home: the review queue (counts, order, filters, the next operation) and the tables by purpose."""

import datetime as dt
import re

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import InvalidArgument
from engine.definitions import definition_validate
from engine.runner import runner_settle
from history.models import WorkflowDefinition, WorkflowInstance
from testkit.states import TASK_STEP, poll_round_unknown_state, task_failed_state, task_unknown_state
from tests.console.test_recovery_forms import _form, _review_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(tenancy):
    """Two instances in review, the lease expiry first (the older review), then the failed task."""
    unknown = task_unknown_state(tenancy)
    failed = task_failed_state(tenancy)
    since = WorkflowInstance.objects.get(pk=unknown.instance.id).review_since
    WorkflowInstance.objects.filter(pk=failed.instance.id).update(
        business_key="refund-77", review_since=since + dt.timedelta(hours=2, minutes=5)
    )
    return unknown.instance, failed.instance


def _home(client, query: str = "") -> str:
    response = client.get(f"/admin/{query}")
    assert response.status_code == 200
    return response.content.decode()


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-instance="([^"]+)"', html)


def test_the_home_lists_the_instances_in_review_oldest_first_with_counts_and_each_next_operation(
    client, console_user, queue
):
    unknown, failed = queue
    client.force_login(console_user("olga", "operators"))
    html = _home(client)
    assert "2 instances in review" in html
    assert _rows(html) == [unknown.id, failed.id]
    causes = dict(re.findall(r'data-cause="(\w+)">\w+</a> <strong data-count>(\d+)</strong>', html))
    assert causes == {"task_outcome_unknown": "1", "task_failed_budget_left": "1"}
    row = {instance: html.split(f'data-instance="{instance}"')[1].split("</tr>")[0] for instance in _rows(html)}
    assert 'data-operation="review-task"' in row[unknown.id] and "in review for" in html
    assert 'data-operation="retry-step"' in row[failed.id]
    link = re.search(r'href="([^"]+)" data-operation="retry-step"', row[failed.id]).group(1).replace("&amp;", "&")
    form = client.get(link).content.decode()
    assert f'name="expected_revision" value="{failed.revision}"' in form


def test_the_queue_filters_by_cause_definition_and_id_or_business_key_prefix_and_names_a_bad_filter(
    client, console_user, queue
):
    unknown, failed = queue
    client.force_login(console_user("olga", "operators"))
    assert _rows(_home(client, "?review_cause=task_outcome_unknown")) == [unknown.id]
    assert _rows(_home(client, f"?q={failed.id[:12]}")) == [failed.id]
    assert _rows(_home(client, "?q=refund-7")) == [failed.id]
    assert _rows(_home(client, f"?definition={failed.definition.name}")) == [
        i.id for i in queue if i.definition.name == failed.definition.name
    ]
    html = _home(client, "?review_cause=bogus")
    assert _rows(html) == [] and "review_cause: &#x27;bogus&#x27; is not a review cause" in html
    assert "Nothing in review matches these filters." in html


def test_an_auditor_sees_the_queue_without_operations(client, console_user, queue):
    client.force_login(console_user("audrey", "auditors"))
    html = _home(client)
    assert len(_rows(html)) == 2 and "data-operation=" not in html


def test_the_tables_are_grouped_by_purpose_and_each_appears_once(admin_client):
    html = _home(admin_client)
    headings = re.findall(r'class="section" title="[^"]*">([^<]+)</a>', html)
    assert headings == ["Work", "Engine records", "Audit", "Access"]
    registered = {model._meta.verbose_name_plural.capitalize() for model in admin.site._registry}
    listed = re.findall(r'<th scope="row" id="[^"]+">\s*<a href="[^"]+">([^<]+)</a>', html)
    assert sorted(listed) == sorted(registered)


def test_the_instance_changelist_searches_id_and_business_key_prefixes(client, console_user, queue):
    unknown, failed = queue
    client.force_login(console_user("olga", "operators"))
    url = "/admin/history/workflowinstance/"
    for term, found in ((unknown.id[:10], unknown.id), ("refund-7", failed.id)):
        html = client.get(url, {"q": term}).content.decode()
        assert found in html and (unknown.id if found == failed.id else failed.id) not in html


def test_the_status_the_instance_page_polls_counts_what_the_background_has_yet_to_take_in(
    client, console_user, tenancy
):
    state = task_unknown_state(tenancy)
    url = f"/admin/history/workflowinstance/{state.instance.id}/status/"
    assert client.get(url).status_code == 302  # to the login
    client.force_login(console_user("olga", "operators"))
    assert client.get(url).json()["pending"] == 0
    client.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    status = client.get(url).json()  # the REVIEWED result event waits in the inbox: the page follows it
    revision = state.instance.revision + 1
    assert status == {
        "state": "NEEDS_REVIEW",
        "revision": str(revision),
        "pending": 1,
        "moving": True,
        "version": f"{revision}.1",
    }
    page = client.get(f"/admin/history/workflowinstance/{state.instance.id}/change/").content.decode()
    assert 'id="follow"' in page and "console/follow.js" in page and 'id="next-operation"' not in page
    runner_settle()
    status = client.get(url).json()  # in review with nothing to take in: only an operator moves it now
    assert status["pending"] == 0 and status["moving"] is False
    page = client.get(f"/admin/history/workflowinstance/{state.instance.id}/change/").content.decode()
    assert 'id="follow"' not in page and 'data-next="resolve-step"' in page
    form = client.get(re.search(r'href="([^"]+)" data-next=', page).group(1).replace("&amp;", "&")).content.decode()
    assert 'id="prefilled"' in form and "payment confirmed in the ledger</textarea>" in form and "autofocus" in form


def test_reviews_past_their_definitions_sla_come_first_and_are_flagged(client, console_user, tenancy):
    unknown = task_unknown_state(tenancy).instance
    polled = poll_round_unknown_state(tenancy).instance  # another definition, which declares an SLA
    since = WorkflowInstance.objects.get(pk=unknown.id).review_since
    WorkflowInstance.objects.filter(pk=polled.id).update(review_since=since + dt.timedelta(minutes=3))
    spec = polled.definition.spec | {"review_sla_seconds": 60}
    type(polled.definition).objects.filter(pk=polled.definition_id).update(spec=spec)
    client.force_login(console_user("olga", "operators"))
    html = _home(client)
    assert _rows(html) == [polled.id, unknown.id]  # the newer review first: it is past its SLA
    assert 'id="queue-over-sla">1 past its definition' in html
    assert f'<tr data-instance="{polled.id}" class="weave-over-sla">' in html
    row = html.split(f'data-instance="{polled.id}"')[1].split("</tr>")[0]
    assert "over its SLA)" in row


def test_a_definition_declares_its_review_sla_and_a_bad_one_is_refused_by_name(tenancy):
    namespace, application, _ = tenancy
    document = {"name": "slow", "application": application.name, "steps": [TASK_STEP], "review_sla_seconds": 900}
    assert definition_validate(namespace_id=namespace.id, document=document)["spec"]["review_sla_seconds"] == 900
    with pytest.raises(InvalidArgument, match="review_sla_seconds"):
        definition_validate(namespace_id=namespace.id, document=document | {"review_sla_seconds": 0})


def test_the_queue_reads_its_instances_without_joining_their_definitions(client, console_user, queue):
    # Joined to the few definitions, MariaDB drove the read from them and sorted every instance of each: 18 s at
    # 1M. The rows come from the instance table alone, their definitions by key after.
    client.force_login(console_user("olga", "operators"))
    with CaptureQueriesContext(connection) as captured:
        html = _home(client)
    assert len(_rows(html)) == 2
    instance, definition = (connection.ops.quote_name(m._meta.db_table) for m in (WorkflowInstance, WorkflowDefinition))
    # The queue's reads: instances in the order of their review.
    sqls = [query["sql"] for query in captured.captured_queries]
    reads = [sql for sql in sqls if f"FROM {instance}" in sql and "review_since" in sql.split("ORDER BY")[-1]]
    assert reads and not [sql for sql in reads if definition in sql]


def test_a_further_row_adds_no_query(client, console_user, queue, tenancy):
    # The page judges its rows together: the instances, definitions, inbox, gates, steps, tasks in review and
    # whether they run, index probes, activations, and the tasks these name (settled, owned and placed, their
    # attempt rows) are one read each for all rows (623 queries for 25 rows at 1M before, 24 a row).
    client.force_login(console_user("olga", "operators"))

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert len(_rows(_home(client))) == len(WorkflowInstance.objects.filter(state="NEEDS_REVIEW"))
        return len(captured.captured_queries)

    two = queries()
    for _ in range(2):
        task_failed_state(tenancy)
    four = queries()
    for _ in range(2):
        task_unknown_state(tenancy)
    assert queries() == four == two
    print("QQQ", two, four)
