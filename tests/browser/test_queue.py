"""The review queue is where an operator lands, and each row's next operation opens its form."""

import json

import pytest
from playwright.sync_api import expect

from engine.runner import runner_settle
from tests.browser.conftest import admin_login, confirm, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_operator_lands_on_the_queue_and_retries_a_failed_step_from_its_row(live_server, page, demo, screenshots):
    page.set_viewport_size({"width": 1280, "height": 900})
    admin_login(page, live_server, "olga")
    assert page.inner_text("#queue-title") == "8 instances in review"
    assert page.locator("#queue-rows tr[data-instance]").count() == 8
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(screenshots / "review-queue.png"), full_page=True)
    docs_screenshot(page, "review-queue")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/")
    page.screenshot(path=str(screenshots / "instance-list.png"), full_page=True)
    # The instance list's table is not cut: it fits inside its scrolling container.
    widths = page.evaluate(
        "[document.querySelector('#result_list').scrollWidth, document.querySelector('.results').clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    page.go_back()

    page.click("#queue-causes a[data-cause=task_failed_budget_left]")
    failed = demo["task_failed_budget_left"]["instance_id"]
    expect(page.locator("#queue-rows tr[data-instance]")).to_have_count(2)  # waits for the filtered page
    assert page.locator(f"#queue-rows tr[data-instance='{failed}']").count() == 1

    page.click(f"#queue-rows tr[data-instance='{failed}'] a[data-operation=retry-step]")
    page.fill("#id_reason", "the card network is back")
    page.fill("#id_evidence_ref", "ticket:OPS-42")
    confirm(page)
    assert page.locator("#step-charge tr.activation").count() == 2


def test_an_unknown_task_is_carried_to_success_from_the_queue_without_retyping(live_server, page, demo, screenshots):
    instance_id = demo["task_unknown"]["instance_id"]
    admin_login(page, live_server, "olga")
    page.click(f"#queue-rows tr[data-instance='{instance_id}'] a[data-operation=review-task]")
    page.select_option("#id_conclusion", "SUCCEEDED")
    page.fill("#id_result", '{"paid": true}')
    page.fill("#id_reason", "the payment is in the ledger")
    page.fill("#id_evidence_ref", "ticket:OPS-42")
    docs_screenshot(page, "operation-form")
    confirm(page, screenshot=screenshots / "form-review-task.png", docs="operation-preview")

    # The review waits for the background: the page says so and follows it without a reload.
    assert page.locator("#follow").is_visible()
    page.evaluate("window.notReloaded = true")
    runner_settle()
    page.wait_for_selector("#next-operation a[data-next=resolve-step]")
    assert page.evaluate("window.notReloaded") is True and page.locator("#follow").count() == 0

    page.click("#next-operation a")
    assert json.loads(page.input_value("#id_result")) == {"paid": True}
    assert page.input_value("#id_reason") == "the payment is in the ledger"
    assert page.input_value("#id_evidence_ref") == "ticket:OPS-42"
    assert page.locator("#prefilled").is_visible()
    page.screenshot(path=str(screenshots / "form-resolve-step-prefilled.png"), full_page=True)
    confirm(page)

    page.click("#next-operation a[data-next=continue]")
    page.fill("#id_reason", "every matter is handled")
    page.fill("#id_evidence_ref", "ticket:OPS-42")
    confirm(page)
    assert page.locator("#follow").is_visible()  # the continuation waits for the runner
    runner_settle()
    page.wait_for_selector("#instance-state:text('SUCCEEDED')")
    page.screenshot(path=str(screenshots / "instance-succeeded.png"), full_page=True)
