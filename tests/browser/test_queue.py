"""The review queue is where an operator lands, and each row's next operation opens its form."""

import pytest

from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_operator_lands_on_the_queue_and_retries_a_failed_step_from_its_row(live_server, page, demo, screenshots):
    page.set_viewport_size({"width": 1280, "height": 900})
    admin_login(page, live_server, "olga")
    assert page.inner_text("#queue-title") == "8 instances in review"
    assert page.locator("#queue-rows tr[data-instance]").count() == 8
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(screenshots / "review-queue.png"), full_page=True)

    page.click("#queue-causes a[data-cause=task_failed_budget_left]")
    failed = demo["task_failed_budget_left"]["instance_id"]
    rows = page.locator("#queue-rows tr[data-instance]")
    assert rows.count() == 2 and page.locator(f"#queue-rows tr[data-instance='{failed}']").count() == 1

    page.click(f"#queue-rows tr[data-instance='{failed}'] a[data-operation=retry-step]")
    page.fill("#id_reason", "the card network is back")
    page.fill("#id_evidence_ref", "ticket:OPS-42")
    page.check("#id_declaration")
    page.click("input[name=_preview]")
    page.wait_for_selector("#preview")
    page.click("input[name=_confirm]")
    page.wait_for_selector("ul.messagelist li.success")
    assert page.locator("#step-charge tr.activation").count() == 2
