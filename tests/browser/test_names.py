"""Instances by name in Chromium: the queue and the instance page lead with the business key and definition, and
the id's copy button puts the whole id on the clipboard under the CSP (a static script, no inline one)."""

import pytest

from console.links import instance_name
from history.models import WorkflowInstance
from tests.browser import test_csp
from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)
violations = test_csp.violations


def test_the_copy_buttons_of_the_queue_and_the_instance_page_copy_the_whole_id(live_server, page, demo, violations):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    instance_id = demo["task_unknown"]["instance_id"]
    instance = WorkflowInstance.objects.select_related("definition").get(pk=instance_id)
    name = instance_name(instance)
    assert name.startswith(f"{instance.business_key} · ")
    admin_login(page, live_server, "olga")
    row = f"#queue-rows tr[data-instance='{instance_id}']"
    assert page.inner_text(f"{row} a[data-instance-name]") == name
    page.click(f"{row} button[data-copy]")
    page.locator(f"{row} button[data-copy]", has_text="copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == instance_id

    page.evaluate("navigator.clipboard.writeText('')")
    page.click(f"{row} a[data-instance-name]")
    assert page.inner_text("h1") == name
    page.click("#weave-instance button[data-copy]")
    page.locator("#weave-instance button[data-copy]", has_text="copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == instance_id
    assert violations == []
