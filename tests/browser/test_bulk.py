"""A bulk RetryStep previews each selected instance and submits only the eligible ones, in a real browser."""

import pytest

from tests.browser.conftest import admin_login, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_bulk_retry_with_one_ineligible_instance_retries_only_the_eligible_one(live_server, page, demo, screenshots):
    failed, unknown = demo["task_failed_budget_left"]["instance_id"], demo["task_unknown"]["instance_id"]
    admin_login(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/")
    for instance_id in (failed, unknown):
        page.check(f"input[name=_selected_action][value='{instance_id}']")
    page.select_option("select[name=action]", "retry_step_selected")
    page.click("button[name=index]")
    page.select_option("#step_key", "charge")
    page.click("input[name=choose_step]")
    assert page.inner_text("#bulk-eligible") == "1 of 2 eligible"
    assert "eligible:" in page.inner_text(f"#bulk-instances tr[data-instance='{failed}']")
    assert "not eligible:" in page.inner_text(f"#bulk-instances tr[data-instance='{unknown}']")
    page.screenshot(path=str(screenshots / "bulk-retry-preview.png"), full_page=True)
    docs_screenshot(page, "bulk-retry")

    page.fill("#id_reason", "the card network is back")
    page.fill("#id_evidence_ref", "ticket:OPS-99")
    page.check("#id_declaration")
    page.click("input[name=apply]")
    page.wait_for_selector("#bulk-results")
    assert page.inner_text(f"#bulk-results tr[data-instance='{failed}']").split("\t")[1].startswith("applied")
    assert "skipped" in page.inner_text(f"#bulk-results tr[data-instance='{unknown}']")
