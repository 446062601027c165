"""An operator recovers engine-made instances through the admin forms, in a real browser."""

import pytest

from engine.runner import runner_settle
from tests.browser.conftest import admin_login, confirm, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def _decide(page, operation, *, reason, result=None, screenshot=None):
    """Open an operation's form from the instance page, preview it, then confirm it."""
    page.click(f"a[data-operation={operation}]")
    page.fill("#id_reason", reason)
    page.fill("#id_evidence_ref", "ticket:OPS-42")
    if result is not None:
        page.select_option("#id_conclusion", "SUCCEEDED")
        page.fill("#id_result", result)
    confirm(page, screenshot=screenshot)


def test_an_operator_reviews_resolves_and_continues_an_unknown_task_to_success(live_server, page, demo, screenshots):
    instance_id = demo["task_unknown"]["instance_id"]
    admin_login(page, live_server, "olga")
    url = f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/"
    page.goto(url)
    assert page.inner_text("#instance-state") == "NEEDS_REVIEW"
    page.screenshot(path=str(screenshots / "instance-task-unknown.png"), full_page=True)
    docs_screenshot(page, "instance-page")
    docs_screenshot(page, "instance-facts", at="#decision-facts")

    _decide(
        page,
        "review-task",
        reason="the payment is in the ledger",
        result='{"paid": true}',
        screenshot=screenshots / "preview-review-task.png",
    )
    runner_settle()  # the background consumes the REVIEWED result event
    page.goto(url)
    _decide(page, "resolve-step", reason="the charge succeeded", result='{"paid": true}')
    page.goto(url)
    _decide(page, "continue", reason="every matter is handled")
    runner_settle()  # the root continuation advances the graph
    page.goto(url)
    assert page.inner_text("#instance-state") == "SUCCEEDED"


def test_an_operator_retries_a_failed_step_and_sees_the_new_activation(live_server, page, demo, screenshots):
    instance_id = demo["task_failed_budget_left"]["instance_id"]
    admin_login(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/")
    assert page.locator("#step-charge tr.activation").count() == 1
    _decide(page, "retry-step", reason="the card network is back")
    timeline = page.locator("#step-charge tr.activation")
    assert timeline.count() == 2
    assert timeline.first.get_attribute("data-sequence") == "2"
    assert "current" in timeline.first.inner_text()
    page.screenshot(path=str(screenshots / "instance-after-retry.png"), full_page=True)
