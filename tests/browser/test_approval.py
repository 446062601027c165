"""Four eyes in Chromium: olga proposes a review where a policy requires approval; anna, an approver, reads the
proposal from the queue and approves it; the operation runs once, under the CSP."""

import pytest
from django.contrib.auth.models import Group, User

from engine.runner import runner_settle
from history.models import (
    ApprovalPolicy,
    Decision,
    Operator,
    Proposal,
    ProposalState,
    Task,
    TaskState,
    WorkflowInstance,
    WorkflowOperation,
)
from tests.browser import test_csp
from tests.browser.conftest import admin_login, docs_screenshot

pytestmark = pytest.mark.django_db(transaction=True)
violations = test_csp.violations


@pytest.fixture
def anna(demo):
    """An approver of the demo namespace, and the policy that every ReviewTask there needs one."""
    olga = Operator.objects.get(user__username="olga")
    user = User.objects.create_user("anna", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="approvers")])
    Operator.objects.create(user=user, namespace_id=olga.namespace_id, actor_id="a" * 32, queue_access="*")
    ApprovalPolicy.objects.create(namespace_id=olga.namespace_id, operation="review-task")
    return user


def test_a_proposal_is_made_by_one_operator_and_approved_by_another(
    live_server, page, demo, anna, screenshots, violations
):
    instance_id = demo["task_unknown"]["instance_id"]
    task_id = Task.objects.get(source_instance_id=instance_id, state=TaskState.NEEDS_REVIEW).id
    revision = WorkflowInstance.objects.get(pk=instance_id).revision
    admin_login(page, live_server, "olga")
    page.click(f"#queue-rows tr[data-instance='{instance_id}'] a[data-operation=review-task]")
    page.fill("#id_reason", "the provider shows the charge as paid")
    page.fill("#id_evidence_ref", "ticket:OPS-9")
    page.select_option("#id_conclusion", "SUCCEEDED")
    page.fill("#id_result", '{"paid": true}')
    page.check("#id_declaration")
    page.click("input[name=_preview]")
    page.click("input[name=_confirm]")
    assert "needs a second person's approval" in page.inner_text("ul.messagelist li.info")
    proposal = Proposal.objects.get(workflow_id=instance_id)
    assert page.inner_text(f"#proposals tr[data-proposal='{proposal.id}'] td:first-child") == "Review task"
    assert WorkflowInstance.objects.get(pk=instance_id).revision == revision
    page.click(f"#proposals tr[data-proposal='{proposal.id}'] a[data-review-proposal]")
    page.wait_for_selector("#own-proposal")  # the click only waits for the navigation to start
    assert page.locator("#approve").count() == 0

    page.context.clear_cookies()
    admin_login(page, live_server, "anna")
    page.click(f"#proposals tr[data-proposal='{proposal.id}'] a[data-review-proposal]")
    assert "olga (operators)" in page.inner_text("#proposal-summary [data-proposer]")
    page.wait_for_selector("#consequences")
    page.screenshot(path=str(screenshots / "proposal-approve.png"), full_page=True)
    docs_screenshot(page, "proposal")
    page.fill("#id_reason", "checked the ticket")
    page.click("#approve")
    assert "Review task approved and applied" in page.inner_text("ul.messagelist li.success")
    assert page.locator("#proposals").count() == 0
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.APPROVED
    assert Task.objects.get(pk=task_id).review_conclusion == "SUCCEEDED"
    assert WorkflowInstance.objects.get(pk=instance_id).revision == revision + 1
    assert violations == []


def test_a_decision_is_proposed_whole_by_one_operator_and_approved_by_another(
    live_server, page, demo, anna, screenshots, violations
):
    instance_id = demo["task_unknown"]["instance_id"]
    admin_login(page, live_server, "olga")
    page.click(f"#queue-rows tr[data-instance='{instance_id}'] a[data-decide]")
    page.fill("#id_result", '{"paid": true}')
    page.fill("#id_reason", "the provider shows the charge as paid")
    page.fill("#id_evidence_ref", "ticket:OPS-9")
    page.check("#id_declaration")
    page.click("input[name=_preview]")
    page.click("input[name=_confirm]")
    assert "needs a second person's approval" in page.inner_text("ul.messagelist li.info")
    decision = Decision.objects.get(workflow_id=instance_id)
    actions = set(WorkflowOperation.objects.filter(workflow_id=instance_id).values_list("action", flat=True))
    assert decision.state == "PROPOSED" and actions == {"workflow.start", "workflow.decision_proposed"}
    page.click(f"#decisions li[data-decision='{decision.id}'] a")
    page.wait_for_selector("#own-decision")
    assert page.locator("#approve").count() == 0

    page.context.clear_cookies()
    admin_login(page, live_server, "anna")
    page.goto(f"{live_server.url}/admin/history/workflowinstance/{instance_id}/change/")
    page.click(f"#decisions li[data-decision='{decision.id}'] a")
    assert "olga (operators)" in page.inner_text("#decision-summary [data-maker]")
    assert page.locator("#chain [data-chain-step]").count() == 3  # ReviewTask → ResolveStep → Continue
    page.screenshot(path=str(screenshots / "decision-approve.png"), full_page=True)
    docs_screenshot(page, "decision-approve")
    page.click("#approve")
    assert "approved: ran Review task" in page.inner_text("ul.messagelist li.success")
    runner_settle()
    page.wait_for_selector(f"#decisions li[data-decision='{decision.id}'][data-decision-state=SUCCEEDED]")
    page.wait_for_selector("#instance-state:text('SUCCEEDED')")
