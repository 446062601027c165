"""The audit list's exports and the viewer's time zone, in a real browser."""

import csv
import io
import json

import pytest
from django.contrib.auth.models import Group, User

from history.models import Namespace, Operator, WorkflowOperation
from tests.browser.conftest import admin_login, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auditor(demo):
    user = User.objects.create_user("audrey", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="auditors")])
    Operator.objects.create(
        user=user, namespace=Namespace.objects.get(name="demo"), actor_id="a" * 32, queue_access="*"
    )
    return user


def _download(page, link: str) -> str:
    with page.expect_download() as download:
        page.click(link)
    return download.value.path().read_text()


def test_the_filtered_audit_list_exports_as_csv_and_json_lines(live_server, page, auditor):
    admin_login(page, live_server, "audrey")
    page.goto(f"{live_server.url}/admin/history/workflowoperation/?q=maintenance")
    expected = list(
        WorkflowOperation.objects.filter(reason__contains="maintenance")
        .order_by("-created_at", "-id")
        .values_list("id", "reason")
    )
    assert expected  # the demo paused an instance "for maintenance"
    docs_screenshot(page, "audit-list")
    rows = list(csv.DictReader(io.StringIO(_download(page, "#export-csv"))))
    assert [(r["id"], r["reason"]) for r in rows] == [tuple(e) for e in expected]
    lines = [json.loads(line) for line in _download(page, "#export-jsonl").splitlines()]
    assert [(line["id"], line["reason"]) for line in lines] == [tuple(e) for e in expected]
    assert all(line["created_at"].endswith("+00:00") for line in lines)


def test_times_follow_the_zone_the_operator_picks_with_utc_on_hover(live_server, page, demo, screenshots):
    admin_login(page, live_server, "olga")
    page.click("#preferences-link")
    page.fill("#id_time_zone", "Asia/Tokyo")
    page.click("input[type=submit]")
    assert page.inner_text("#preferences-link") == "TIMES IN ASIA/TOKYO" or "Asia/Tokyo" in page.inner_text(
        "#preferences-link"
    )
    page.goto(f"{live_server.url}/admin/history/workflowinstance/{demo['task_unknown']['instance_id']}/change/")
    updated = page.locator("dd time").first
    assert updated.inner_text().endswith(" JST") and updated.get_attribute("title").endswith(" UTC")
    page.screenshot(path=str(screenshots / "instance-page-tokyo.png"), full_page=True)
