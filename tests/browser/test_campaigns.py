"""A repair campaign in the browser under four eyes: made from a failure signature, approved by a second person,
started, its canary followed, widened, done; its pages have no serious axe violation."""

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect

from engine.runner import runner_settle
from history.models import ApprovalPolicy, Campaign, Namespace, Operator, WorkflowInstance
from tests.browser.conftest import admin_login, docs_screenshot
from tests.browser.test_accessibility import blocking_violations

pytestmark = pytest.mark.django_db(transaction=True)


def _approver(namespace) -> None:
    user = User.objects.create_user("anna", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="approvers")])
    Operator.objects.create(user=user, namespace=namespace, actor_id="a" * 32, queue_access="*")


def _as(page, live_server, username, campaign) -> None:
    page.context.clear_cookies()
    admin_login(page, live_server, username)
    page.goto(f"{live_server.url}/admin/history/campaign/{campaign.pk}/change/")


def test_a_campaign_is_made_approved_started_widened_and_followed(live_server, page, demo):
    namespace = Namespace.objects.get(name="demo")
    ApprovalPolicy.objects.create(namespace=namespace, operation="review-task", approvals_required=1)
    _approver(namespace)
    unknown = WorkflowInstance.objects.get(pk=demo["task_unknown"]["instance_id"])
    admin_login(page, live_server, "olga")
    page.locator(
        f'#queue-signatures li[data-signature="{unknown.failure_signature_id}"] a', has_text="campaign"
    ).click()
    found = blocking_violations(page, "campaign new")
    page.select_option("#id_kind", "conclude")
    page.select_option("#id_conclusion", "SUCCEEDED")
    page.fill("#id_result", '{"paid": true}')
    page.fill("#id_reason", "the gateway's settlement report lists the charge as paid")
    page.fill("#id_evidence_ref", "ticket:OPS-77")
    page.check("#id_declared")
    page.fill("#id_canary_size", "1")
    page.click("#campaign-new input[name=make]")
    expect(page.locator("#campaign-state")).to_have_text("PROPOSED")
    campaign = Campaign.objects.get()
    expect(page.locator("#campaign-moves input[value=Approve]")).to_be_disabled()  # not the maker's to approve
    expect(page.locator("#campaign-preview")).to_contain_text("would be decided")
    found += blocking_violations(page, "campaign proposed")

    _as(page, live_server, "anna", campaign)
    page.locator("#campaign-moves form", has=page.locator("input[value=Approve]")).locator("input[name=note]").fill(
        "preview read: the signature's instances only"
    )
    page.click("#campaign-moves input[value=Approve]")
    expect(page.locator("#campaign-state")).to_have_text("READY")

    _as(page, live_server, "olga", campaign)
    page.click("#campaign-moves input[value=Start]")
    expect(page.locator("#campaign-state")).to_have_text("RUNNING")
    runner_settle()
    page.reload()
    expect(page.locator("#campaign-state")).to_have_text("CANARY_DONE" if campaign.total > 1 else "DONE")
    if campaign.total > 1:
        _as(page, live_server, "anna", campaign)
        page.click("#campaign-moves input[value='Widen to every item']")
        runner_settle()
        page.reload()
    expect(page.locator("#campaign-state")).to_have_text("DONE")
    expect(page.locator("#campaign-ledger tr[data-outcome=APPLIED]")).to_have_count(campaign.total)
    docs_screenshot(page, "campaign")
    found += blocking_violations(page, "campaign done")
    assert found == [], "\n".join(found)
