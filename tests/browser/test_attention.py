"""An operator acknowledges a review, assigns it, writes a note and corrects it, in Chromium, under the CSP."""

import pytest
from django.contrib.auth.models import Group, User

from history.models import Namespace, Operator, WorkflowInstance
from tests.browser import test_csp
from tests.browser.conftest import admin_login, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)
# The CSP suite's fixture: every CSP refusal and uncaught script error the browser reports.
violations = test_csp.violations

BOB = "b" * 32


@pytest.fixture
def bob(demo):
    """A second operator of the demo namespace, to assign reviews to."""
    user = User.objects.create_user("bob", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="operators")])
    namespace = Namespace.objects.get(pk=Operator.objects.get(user__username="olga").namespace_id)
    Operator.objects.create(user=user, namespace=namespace, actor_id=BOB, queue_access="*")
    return user


def _submitted(page, selector: str) -> str:
    """Click a submit button of the box; the page it comes back to says what happened."""
    page.click(selector)
    page.wait_for_selector("ul.messagelist li")
    return page.inner_text("ul.messagelist li")


def test_acknowledge_assign_and_note_from_the_instance_page_and_see_them_on_the_queue(
    live_server, page, demo, bob, screenshots, violations
):
    instance_id = demo["task_unknown"]["instance_id"]
    before = WorkflowInstance.objects.get(pk=instance_id)
    admin_login(page, live_server, "olga")
    row = f"#queue-rows tr[data-instance='{instance_id}']"
    assert "not acknowledged" in page.inner_text(f"{row} td[data-attention]")
    page.click(f"{row} td:first-child a")
    assert page.inner_text("#acknowledged") == "not yet"

    assert _submitted(page, "#acknowledge") == "Review acknowledged."
    assert page.inner_text("#acknowledged [data-acknowledged-by]") == "olga (operators)"
    assert page.locator("#acknowledge").count() == 0  # once is enough

    page.select_option("#id_assignee", BOB)
    assert _submitted(page, "#assign") == "Review assigned."
    assert page.inner_text("#assigned [data-assignee]") == "bob (operators)"

    page.fill("#id_text", "The provider's dashboard shows the charge as pending.")
    page.fill("#attention #id_evidence_ref", "ticket:OPS-42")
    assert _submitted(page, "#add-note") == "Note added."
    first = page.get_attribute("#notes li[data-note]", "data-note")
    page.select_option("#id_corrects", first)
    page.fill("#id_text", "Correction: the provider settled it; the charge is paid.")
    assert _submitted(page, "#add-note") == "Note added."
    correction = page.locator(f"#notes li[data-corrects='{first}']")
    assert "the charge is paid" in correction.inner_text()
    assert correction.locator("del").inner_text() == "The provider's dashboard shows the charge as pending."
    assert page.eval_on_selector("#attention", "e => getComputedStyle(e).borderStyle") == "solid"
    page.screenshot(path=str(screenshots / "attention-and-notes.png"), full_page=True)
    docs_screenshot(page, "attention-and-notes", at="#attention")

    # Nothing of the engine moved: the page shows the revision it had.
    assert page.inner_text("#instance-revision") == str(before.revision)
    after = WorkflowInstance.objects.get(pk=instance_id)
    assert (after.state, after.revision, after.control_revision) == (
        before.state,
        before.revision,
        before.control_revision,
    )

    page.goto(f"{live_server.url}/admin/")
    attention = page.inner_text(f"{row} td[data-attention]")
    assert "ack by olga" in attention and "assigned to bob" in attention and "2 notes" in attention
    page.screenshot(path=str(screenshots / "review-queue-attention.png"), full_page=True)
    assert violations == []
