"""An incident case in the browser: opened from a failure signature on the home page, a note added, an instance
abandoned, the case page's progress followed; its pages and the webhook's have no serious axe violation."""

import pytest
from playwright.sync_api import expect

from console.models import Case
from tests.browser.conftest import admin_login, docs_screenshot
from tests.browser.test_accessibility import blocking_violations

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_opens_and_works_a_case_from_the_home_page(live_server, page, demo):
    admin_login(page, live_server, "olga")
    page.locator("#queue-signatures a.weave-case-link").first.click()
    found = blocking_violations(page, "case open")
    page.fill("#id_title", "Payments stuck on the card gateway")
    page.fill("#id_ticket_url", "https://tickets.example/INC-1234")
    page.click("#case-open input[type=submit]")
    progress = page.locator("#case-progress")
    expect(progress).to_contain_text("Accounted for: 0 of")
    case = Case.objects.get()
    total = case.members.count()
    page.fill("#case-note-text", "The gateway rotated its keys at 03:00")
    page.fill("#case-note-evidence", "https://logs.example/q/42")
    page.click("#case-notes input[type=submit]")
    expect(page.locator("#case-notes")).to_contain_text("The gateway rotated its keys at 03:00")
    member = page.locator("#case-members tr[data-member]").first
    member.locator("input[name=reason]").fill("customer cancelled the order")
    member.locator("input[type=submit]").click()
    expect(progress).to_contain_text(f"Accounted for: 1 of {total}")
    docs_screenshot(page, "case")
    found += blocking_violations(page, "case page")
    page.goto(f"{live_server.url}/admin/history/webhook/")
    found += blocking_violations(page, "webhooks")
    assert found == [], "\n".join(found)
