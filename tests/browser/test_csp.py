"""The admin, a recovery form and the API docs work in a real browser under the Content-Security-Policy."""

import pytest

from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def violations(page):
    """Every CSP refusal the browser reports on the console, and every uncaught script error."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: seen.append(str(e)))
    return seen


def test_admin_pages_and_a_recovery_form_render_their_styles_under_the_policy(live_server, page, demo, violations):
    admin_login(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/")
    instance_id = demo["task_unknown"]["instance_id"]
    page.goto(f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/")
    # The page's own <style> applied: its facts are laid out as a grid.
    assert page.eval_on_selector(".weave-facts", "e => getComputedStyle(e).display") == "grid"
    page.click("a[data-operation=review-task]")
    page.wait_for_selector("#recovery-form")
    page.fill("#id_reason", "checked the ledger")
    page.fill("#id_evidence_ref", "ticket:OPS-7")
    page.check("#id_declaration")
    page.select_option("#id_conclusion", "SUCCEEDED")
    page.fill("#id_result", '{"paid": true}')
    page.click("input[name=_preview]")
    page.wait_for_selector("#preview")
    assert page.eval_on_selector(".weave-preview tr.changed td", "e => getComputedStyle(e).fontWeight") == "700"
    assert violations == []


def test_the_api_docs_render_under_the_policy(live_server, page, violations):
    page.goto(f"{live_server.url}/v1/docs/")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "Weave API" in page.inner_text(".swagger-ui .info .title")
    page.wait_for_selector(".opblock")
    assert page.eval_on_selector("body", "e => getComputedStyle(e).margin") == "0px"
    assert violations == []
