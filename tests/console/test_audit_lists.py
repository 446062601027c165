"""The audit lists: who the actor is, the admin request id, reason and time-range filters, streamed exports."""

import csv
import datetime as dt
import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import audit
from engine.signaling import signal_accept
from history.models import ExecutionAudit, SignalOperation, WorkflowInstance, WorkflowOperation
from testkit.states import SIGNAL, task_unknown_state
from tests.console.test_recovery_forms import _form, _review_post

pytestmark = pytest.mark.django_db
LIST = "/admin/history/workflowoperation/"


@pytest.fixture
def reviewed(client, console_user, tenancy):
    """One ReviewTask committed through the admin form by olga; the client is logged in as olga (operator
    and auditor); returns (the audit row, the request id of the POST that committed it)."""
    state = task_unknown_state(tenancy)
    client.force_login(console_user("olga", "operators", "auditors"))
    response = client.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    assert response.status_code == 302
    row = WorkflowOperation.objects.get(workflow=state.instance, action="workflow.review_task")
    return row, response["X-Request-Id"]


def _body(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_an_admin_write_carries_its_request_id_and_the_list_names_the_operator(client, reviewed):
    row, request_id = reviewed
    assert row.request_id == request_id and len(request_id) == 32
    html = client.get(LIST).content.decode()
    assert "olga (auditors, operators)" in html and row.actor_id in html
    assert "payment confirmed in the ledger" in html and request_id in html
    when = row.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert when in html
    page = client.get(f"/admin/history/workflowinstance/{row.workflow_id}/change/").content.decode()
    assert f'olga (auditors, operators) <code title="{row.actor_id}">' in page


@pytest.mark.parametrize(("term", "found"), [("ledger", True), ("olga", True), ("nobody-here", False)])
def test_the_list_searches_reason_words_and_login_names(client, reviewed, term, found):
    row, _ = reviewed
    html = client.get(LIST, {"q": term}).content.decode()
    assert (f"{row.id}/change/" in html) is found


def _review_audits(row) -> dict[str, object]:
    """The workflow and the execution audit rows one ReviewTask wrote, by their list's path."""
    task_audit = ExecutionAudit.objects.get(id=row.execution_audit_id)
    return {LIST: row, "/admin/history/executionaudit/": task_audit}


@pytest.mark.parametrize(
    ("term", "found"),
    [("OPS-123", True), ("ticket:OPS-123", True), ("ticket", True), ("OPS-124", False)],
)
def test_the_audit_lists_find_a_row_by_text_its_evidence_ref_contains(client, reviewed, term, found):
    row, _ = reviewed
    assert row.evidence_ref == "ticket:OPS-123"
    for path, audit_row in _review_audits(row).items():
        html = client.get(path, {"q": term}).content.decode()
        assert (f"{audit_row.id}/change/" in html) is found, path


def test_the_audit_lists_find_the_rows_of_an_instance_by_its_exact_business_key(client, reviewed):
    row, _ = reviewed
    key = WorkflowInstance.objects.get(id=row.workflow_id).business_key
    assert key.startswith("order-")
    for path, audit_row in _review_audits(row).items():
        for term, found in ((key, True), (key[:-1], False), (key + "0", False)):
            html = client.get(path, {"q": term}).content.decode()
            assert (f"{audit_row.id}/change/" in html) is found, (path, term)


def test_the_signal_audit_finds_an_acceptance_by_its_evidence_ref_and_business_key(client, console_user, engine):
    definition = engine.define([SIGNAL])
    instance = engine.start(definition, {}, business_key="order-77")
    engine.settle()
    command = {"name": "go", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "approved"}
    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command=command | {"evidence_ref": "ticket:OPS-42"},
        idempotency_key="sig-1",
    )
    row = SignalOperation.objects.get(workflow=instance)
    client.force_login(console_user("audrey", "auditors"))
    for term, found in (("OPS-42", True), ("order-77", True), ("order-7", False), ("OPS-4242", False)):
        html = client.get("/admin/history/signaloperation/", {"q": term}).content.decode()
        assert (f"{row.id}/change/" in html) is found, term


def test_the_time_range_filters_and_names_a_bad_bound(client, reviewed):
    row, _ = reviewed
    at = row.created_at.astimezone(dt.UTC).replace(tzinfo=None)
    inside = {
        "created_at__gte": (at - dt.timedelta(seconds=1)).isoformat(),
        "created_at__lt": (at + dt.timedelta(seconds=1)).isoformat(),
    }
    after = {"created_at__gte": (at + dt.timedelta(seconds=1)).isoformat()}
    assert f"{row.id}/change/" in client.get(LIST, inside).content.decode()
    assert f"{row.id}/change/" not in client.get(LIST, after).content.decode()
    html = client.get(LIST, {"created_at__gte": "yesterday"}, follow=True).content.decode()
    assert "Filter created_at__gte (from): &#x27;yesterday&#x27; is not a date and time" in html
    assert client.get(f"{LIST}export/csv/", {"created_at__gte": "yesterday"}).status_code == 400


def test_exports_stream_every_filtered_row_newest_first_in_csv_and_json_lines(client, reviewed, monkeypatch):
    row, request_id = reviewed
    # More rows than one batch, with equal times, so the keyset's tie-break on id is exercised.
    monkeypatch.setattr(audit, "EXPORT_BATCH", 2)
    for n in range(4):
        WorkflowOperation.objects.create(
            namespace_id=row.namespace_id,
            workflow_id=row.workflow_id,
            actor_id=row.actor_id,
            action="workflow.note",
            reason=f"extra {n}",
            created_at=row.created_at,
        )
    expected = list(WorkflowOperation.objects.order_by("-created_at", "-id").values_list("id", flat=True))

    response = client.get(f"{LIST}export/jsonl/")
    assert response["Content-Type"] == "application/x-ndjson" and response.streaming
    lines = [json.loads(line) for line in _body(response).splitlines()]
    assert [line["id"] for line in lines] == expected
    reviewed_line = next(line for line in lines if line["id"] == row.id)
    assert reviewed_line["actor"] == "olga (auditors, operators)" and reviewed_line["request_id"] == request_id
    assert reviewed_line["workflow_id"] == row.workflow_id and reviewed_line["after"] == row.after

    rows = list(csv.DictReader(io.StringIO(_body(client.get(f"{LIST}export/csv/", {"q": "extra"})))))
    extra = WorkflowOperation.objects.filter(reason__startswith="extra ").order_by("-created_at", "-id")
    assert [r["id"] for r in rows] == list(extra.values_list("id", flat=True)) and len(rows) == 4
    assert rows[0]["reason"].startswith("extra ") and rows[0]["created_at"].endswith("+00:00")
    assert client.get(f"{LIST}export/xml/").status_code == 404


def test_an_export_reads_an_unnamed_actor_once_whatever_the_rows(client, reviewed, monkeypatch):
    row, _ = reviewed
    monkeypatch.setattr(audit, "EXPORT_BATCH", 100)  # one batch throughout: only the rows' number changes
    counts = []
    for extra in (0, 10, 40):  # the first export warms the process's caches (content types, permissions)
        WorkflowOperation.objects.bulk_create(
            WorkflowOperation(
                namespace_id=row.namespace_id,
                workflow_id=row.workflow_id,
                actor_id="f" * 32,  # no login, no token: nobody is known by this actor
                action="workflow.note",
                reason=f"scripted {n}",
                # Older than olga's: the list's first page, built on the way, names both actors every time.
                created_at=row.created_at - dt.timedelta(minutes=1),
            )
            for n in range(extra)
        )
        with CaptureQueriesContext(connection) as queries:
            lines = _body(client.get(f"{LIST}export/jsonl/")).splitlines()
        assert len(lines) == WorkflowOperation.objects.count()
        assert {json.loads(line)["actor"] for line in lines if "scripted" in line} == ({""} if extra else set())
        counts.append(len(queries))
    # Each actor's names are looked up once (logins, then tokens), not again for each of its rows.
    assert counts[1] == counts[2]


def test_an_operator_without_the_audit_permission_cannot_export(client, console_user, tenancy):
    client.force_login(console_user("vic", "operators"))
    assert client.get(f"{LIST}export/csv/").status_code == 403


@pytest.mark.parametrize("reason", ['=HYPERLINK("http://x")', "-1+2"])
def test_csv_cells_a_spreadsheet_would_run_as_formulas_open_as_text_and_json_lines_keep_them_exact(
    client, console_user, tenancy, reason
):
    state = task_unknown_state(tenancy)
    client.force_login(console_user("olga", "operators", "auditors"))
    post = _review_post(state, reason=reason) | {"_confirm": "1"}
    assert client.post(_form(state.instance.id, "review-task"), post).status_code == 302
    row = WorkflowOperation.objects.get(workflow=state.instance, action="workflow.review_task")
    assert row.reason == reason

    [line] = [json.loads(line) for line in _body(client.get(f"{LIST}export/jsonl/", {"q": row.id})).splitlines()]
    assert line["reason"] == reason
    [cells] = list(csv.DictReader(io.StringIO(_body(client.get(f"{LIST}export/csv/", {"q": row.id})))))
    assert cells["reason"] == "'" + reason
    # Only such text is touched: the ids, the times and the JSON of the same row read as they are.
    assert (cells["id"], cells["created_at"], json.loads(cells["after"])) == (row.id, line["created_at"], row.after)
