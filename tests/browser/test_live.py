"""The console follows the background by itself: the instance page while the instance can still move, and the
queue's counts and rows on the home page; no reload."""

import pytest
from django.core.management import call_command

from engine.demo import TASKS
from engine.runner import runner_settle
from history.models import WorkflowInstance
from tests.browser.conftest import admin_login, confirm

pytestmark = pytest.mark.django_db(transaction=True)


def test_after_resume_the_instance_page_follows_the_instance_to_its_end_without_a_reload(
    live_server, page, demo, screenshots
):
    instance_id = demo["paused"]["instance_id"]
    admin_login(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/")
    assert page.inner_text("#instance-state") == "RUNNING" and page.locator("#follow").is_visible()

    page.click("a[data-control=resume]")
    page.fill("#id_reason", "the maintenance window is over")
    page.click("input[name=_preview]")
    page.wait_for_selector("#preview")
    assert "The gate opens" in page.inner_text("#preview-effect")
    assert "no" in page.inner_text("#consequences")  # instance paused: yes → no
    page.screenshot(path=str(screenshots / "preview-resume.png"), full_page=True)
    page.click("input[name=_confirm]")
    page.wait_for_selector("ul.messagelist li.success")
    assert page.get_attribute("#weave-instance", "aria-live") == "polite"

    page.evaluate("window.notReloaded = true")
    namespace = WorkflowInstance.objects.select_related("namespace").get(pk=instance_id).namespace.name
    # The worker as it runs in production claims the task the resume let through; the runner takes in its result.
    call_command("weave_worker", "--queue", TASKS, "--namespace", namespace, "--batch", "100", "--once")
    runner_settle()
    page.wait_for_selector("#instance-state:text('SUCCEEDED')")
    assert page.evaluate("window.notReloaded") is True
    # The page stopped following, and the message about the page before the swap is gone.
    assert page.locator("#follow").count() == 0 and page.locator("ul.messagelist").count() == 0
    assert page.get_attribute("#weave-instance", "data-live") is None
    page.screenshot(path=str(screenshots / "instance-followed-to-the-end.png"), full_page=True)


def test_a_queue_row_leaves_the_home_page_by_itself_once_its_instance_leaves_review(live_server, page, demo):
    instance_id = demo["task_failed_budget_left"]["instance_id"]
    admin_login(page, live_server, "olga")  # the home page is the queue
    row = f"#queue-rows tr[data-instance='{instance_id}']"
    page.wait_for_selector(row)
    in_review = page.inner_text("#queue-title")
    page.evaluate("window.notReloaded = true")

    # The decision is carried to its end in a second tab, the first left as it is.
    other = page.context.new_page()
    other.goto(f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/")
    for operation in ("retry-step", "continue"):
        other.wait_for_selector(f"#next-operation a[data-next={operation}]")
        other.click("#next-operation a")
        other.fill("#id_reason", "the card network is back")
        other.fill("#id_evidence_ref", "ticket:OPS-42")
        confirm(other)
        runner_settle()
    other.wait_for_selector("#instance-state:text('RUNNING')")

    page.wait_for_selector(row, state="detached", timeout=30_000)
    assert page.evaluate("window.notReloaded") is True
    assert page.inner_text("#queue-title") != in_review
