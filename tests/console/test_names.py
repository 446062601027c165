"""Human names: wherever the console names an instance, its business key and definition lead and the hex id
follows, short, whole on hover, with a copy button."""

import csv
import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from console.links import instance_label, instance_name
from history.models import ApprovalPolicy, Proposal, WorkflowInstance
from testkit.states import task_unknown_state
from tests.console.test_recovery_forms import _form, _page, _review_post
from tests.factories import WorkflowInstanceFactory, WorkflowOperationFactory

pytestmark = pytest.mark.django_db


def _copy(instance_id: str) -> str:
    return f'data-copy="{instance_id}"'


@pytest.fixture
def review(tenancy):
    return task_unknown_state(tenancy)


def test_an_instance_is_named_by_business_key_and_definition_else_by_definition_and_the_start_of_its_id():
    keyed = WorkflowInstanceFactory(business_key="refund-77", definition__name="payments", definition__version=3)
    assert instance_name(keyed) == "refund-77 · payments v3"
    bare = WorkflowInstanceFactory(business_key="", definition__name="payments")
    assert instance_name(bare) == f"payments v1 · {bare.id[:8]}"
    label = instance_label(keyed)
    url = f"/admin/history/workflowinstance/{keyed.id}/change/"
    assert label.startswith(f'<a href="{url}" data-instance-name>refund-77 · payments v3</a>')
    assert f'<code class="weave-muted" title="{keyed.id}">{keyed.id[:8]}…</code>' in label
    assert _copy(keyed.id) in label and "<script" not in label
    # The label names a bare instance by its definition alone: its id follows, not twice.
    assert "data-instance-name>payments v1</a>" in instance_label(bare)


def test_the_instance_page_is_headed_and_titled_by_the_name_with_the_id_to_copy(client, console_user, review):
    client.force_login(console_user("olga", "operators"))
    html = client.get(_page(review.instance.id)).content.decode()
    name = instance_name(review.instance)
    assert review.instance.business_key in name
    assert f"<title>{name} | Weave operations</title>" in html and f"<h1>{name}</h1>" in html
    assert f"› {name}\n" in html  # the breadcrumb
    assert _copy(review.instance.id) in html and "console/copy.js" in html


def test_the_operation_control_and_signal_forms_and_the_proposal_page_are_titled_by_the_name(
    client, console_user, review, tenancy
):
    client.force_login(console_user("olga", "operators"))
    name = instance_name(review.instance)
    base = f"/admin/history/workflowinstance/{review.instance.id}"
    for url, title in (
        (_form(review.instance.id, "review-task"), "Review task"),
        (f"{base}/control/pause/", "Pause instance"),
        (f"{base}/signal/", "Send signal"),
    ):
        assert f"<title>{title} — {name} | Weave operations</title>" in client.get(url).content.decode(), url
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task")
    client.post(_form(review.instance.id, "review-task"), _review_post(review) | {"_confirm": "1"})
    proposal = Proposal.objects.get(workflow_id=review.instance.id)
    page = client.get(f"{base}/proposals/{proposal.id}/").content.decode()
    assert f"<title>Proposal — {name} | Weave operations</title>" in page
    assert f'<a href="{base}/change/">{name}</a> › Proposal' in page


def test_the_queue_names_each_row_by_business_key_and_definition_with_the_id_to_copy(client, console_user, review):
    client.force_login(console_user("olga", "operators"))
    html = client.get("/admin/").content.decode()
    row = html.split(f'<tr data-instance="{review.instance.id}"')[1].split("</tr>")[0]
    assert str(instance_label(review.instance)) in row
    assert "console/copy.js" in html


def test_the_instance_list_names_each_instance_in_the_same_queries_however_many_rows(client, console_user, tenancy):
    client.force_login(console_user("olga", "operators"))
    first = task_unknown_state(tenancy).instance

    def listed() -> tuple[str, int]:
        with CaptureQueriesContext(connection) as captured:
            html = client.get("/admin/history/workflowinstance/").content.decode()
        return html, len(captured)

    html, one = listed()
    cells = re.findall(r'<td class="field-instance">(.*?)</td>', html, re.S)
    assert cells == [str(instance_label(WorkflowInstance.objects.select_related("definition").get(pk=first.id)))]
    assert "console/copy.js" in html
    for _ in range(3):
        task_unknown_state(tenancy)
    html, four = listed()
    assert len(re.findall(r'<td class="field-instance">', html)) == 4 and four == one


def test_the_audit_lists_and_their_exports_name_the_instance(admin_client, console_user, review, tenancy):
    operator = Client()
    operator.force_login(console_user("olga", "operators"))
    operator.post(_form(review.instance.id, "review-task"), _review_post(review) | {"_confirm": "1"})
    label, name = str(instance_label(review.instance)), instance_name(review.instance)
    for path in ("workflowoperation", "executionaudit"):
        html = admin_client.get(f"/admin/history/{path}/").content.decode()
        cells = re.findall(r'<td class="field-instance">(.*?)</td>', html, re.S)
        assert cells and all(cell.startswith(label) for cell in cells), path
        rows = list(csv.DictReader(io.StringIO(_body(admin_client.get(f"/admin/history/{path}/export/csv/")))))
        assert rows and {row["instance"] for row in rows} == {name}, path


def test_the_audit_list_names_instances_in_the_same_queries_however_many_rows(admin_client, tenancy):
    def listed() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get("/admin/history/workflowoperation/").status_code == 200
        return len(captured)

    WorkflowOperationFactory()
    one = listed()
    for _ in range(3):
        WorkflowOperationFactory()
    assert listed() == one


def _body(response) -> str:
    return b"".join(response.streaming_content).decode()
