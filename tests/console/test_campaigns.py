"""Campaigns in the console: made from a selection of any size, a failure signature or pasted lines; previewed,
started, widened and followed on their page, with the ledger, its filter and its exports."""

import html
import json
import re

import pytest

from engine.runner import runner_pass, runner_settle
from history.models import ApprovalPolicy, Campaign, CampaignItem, CampaignState, ItemOutcome, WorkflowInstance
from testkit.states import task_unknown_state

pytestmark = pytest.mark.django_db

FIELDS = {
    "title": "gateway outage",
    "kind": "conclude",
    "step_key": "charge",
    "conclusion": "SUCCEEDED",
    "result": '{"paid": true}',
    "reason": "the settlement report lists every charge as paid",
    "evidence_ref": "ticket:OPS-77",
    "declared": "on",
    "canary_size": "1",
    "halt_percent": "10",
    "rate_per_second": "1000",
}
CHANGELIST = "/admin/history/workflowinstance/"


def _page(client, campaign) -> str:
    return client.get(f"/admin/history/campaign/{campaign.pk}/change/").content.decode()


def _move(client, campaign, action, **extra):
    return client.post(f"/admin/history/campaign/{campaign.pk}/move/", {"action": action, **extra})


def test_select_all_becomes_a_campaign_that_is_previewed_started_verified_and_exported(client, tenancy, console_user):
    instances = [task_unknown_state(tenancy).instance for _ in range(3)]
    client.force_login(console_user("olga", "operators"))
    chosen = {
        "action": "campaign_from_selection",
        "select_across": "1",
        "index": "0",
        "_selected_action": [instances[0].id],
    }
    form = client.post(CHANGELIST, chosen).content.decode()
    assert re.search(r"<strong>3</strong> instances — 3 instances selected on the instance list", form)
    missing = client.post(CHANGELIST, {**chosen, **FIELDS, "declared": "", "make": "1"}).content.decode()
    assert 'id="campaign-errors"' in missing and "declared" in missing and not Campaign.objects.exists()
    made = client.post(CHANGELIST, {**chosen, **FIELDS, "make": "1"})
    campaign = Campaign.objects.get()
    assert made.status_code == 302 and made["Location"].endswith(f"/admin/history/campaign/{campaign.pk}/change/")
    assert (campaign.total, campaign.owner, campaign.state) == (3, "olga", CampaignState.READY)
    page = _page(client, campaign)
    assert re.search(r'<li data-verdict="would be decided"><strong>3</strong>', page)
    assert page.count("review-task possible") == 3
    _move(client, campaign, "started")
    runner_pass()  # the canary's decision is made
    page = _page(client, campaign)
    assert 'id="campaign-state">CANARY_DONE<' in page and len(re.findall(r'data-outcome="APPLIED"><td>', page)) == 1
    home = client.get("/admin/").content.decode()
    assert re.search(rf'<li data-campaign="{campaign.pk}">.*?<strong>CANARY_DONE</strong>.*?1 of 3', home, re.S)
    runner_settle()  # its repair worked: it widens itself and decides the rest
    campaign.refresh_from_db()
    assert campaign.state == CampaignState.DONE and campaign.log[-2]["note"] == "every repair of the canary's 1 worked"
    page = _page(client, campaign)
    verified = re.search(r'<p id="campaign-verified">(.*?)</p>', page, re.S).group(1)
    assert '<span data-verdict="EFFECTIVE">EFFECTIVE: 3</span>' in verified
    applied = client.get(f"/admin/history/campaign/{campaign.pk}/change/", {"outcome": "APPLIED"}).content.decode()
    assert {i.id for i in instances} == set(re.findall(r'<tr data-item="(\w+)" data-outcome="APPLIED">', applied))
    lines = b"".join(client.get(f"/admin/history/campaign/{campaign.pk}/ledger.jsonl").streaming_content).splitlines()
    assert [json.loads(line)["outcome"] for line in lines] == ["APPLIED"] * 3
    csv = b"".join(client.get(f"/admin/history/campaign/{campaign.pk}/ledger.csv").streaming_content).decode()
    assert csv.splitlines()[0] == "position,instance,revision,outcome,code,detail,decision,done_at"


def test_a_signature_becomes_a_campaign_of_its_instances_in_review(client, tenancy, console_user):
    instances = [task_unknown_state(tenancy).instance for _ in range(2)]
    signature = WorkflowInstance.objects.get(pk=instances[0].pk).failure_signature_id
    client.force_login(console_user("olga", "operators"))
    home = client.get("/admin/").content.decode()
    assert f'href="/admin/history/campaign/add/?signature={signature}"' in home
    form = client.get("/admin/history/campaign/add/", {"signature": signature}).content.decode()
    assert "<strong>2</strong> instances — failure signature" in form and 'value="charge"' in form
    client.post(f"/admin/history/campaign/add/?signature={signature}", FIELDS)
    campaign = Campaign.objects.get()
    assert campaign.source.startswith(f"failure signature {signature}")
    assert set(CampaignItem.objects.filter(campaign=campaign).values_list("instance_id", flat=True)) == {
        i.id for i in instances
    }


def test_pasted_lines_name_the_unknown_ones_and_nothing_is_made_until_each_is_found(client, tenancy, console_user):
    instance = task_unknown_state(tenancy).instance
    client.force_login(console_user("olga", "operators"))
    refused = client.post("/admin/history/campaign/add/", {**FIELDS, "instances": f"{instance.id}\nnot-an-id\n"})
    assert "not found: line 2: not-an-id" in refused.content.decode() and not Campaign.objects.exists()
    client.post("/admin/history/campaign/add/", {**FIELDS, "instances": f"  {instance.id}  \n\n"})
    assert list(CampaignItem.objects.values_list("instance_id", flat=True)) == [instance.id]


def test_under_four_eyes_the_maker_cannot_approve_and_a_viewer_cannot_move(client, tenancy, console_user):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task", approvals_required=1)
    instance = task_unknown_state(tenancy).instance
    client.force_login(console_user("olga", "operators"))
    client.post("/admin/history/campaign/add/", {**FIELDS, "instances": instance.id})
    campaign = Campaign.objects.get()
    assert campaign.state == CampaignState.PROPOSED
    page = _page(client, campaign)
    assert re.search(r'value="Approve" disabled title="a second person', page)
    _move(client, campaign, "approved")
    campaign.refresh_from_db()
    assert campaign.state == CampaignState.PROPOSED
    client.force_login(console_user("vera", "viewers"))
    page = _page(client, campaign)
    assert 'id="campaign-moves"' not in page
    assert _move(client, campaign, "approved").status_code == 403
    client.force_login(console_user("anna", "approvers"))
    _move(client, campaign, "approved", note="preview read")
    campaign.refresh_from_db()
    assert campaign.state == CampaignState.READY and campaign.approval["name"] == "anna"
    assert CampaignItem.objects.get().outcome == ItemOutcome.PENDING


def test_the_instance_page_says_whether_its_repair_worked(client, tenancy, console_user):
    from recovery.repairs import pass_repair_checks
    from testkit.states import task_retried_state

    instance = task_retried_state(tenancy, attempts_used=(1, 1)).instance
    client.force_login(console_user("olga", "operators"))
    page = client.get(f"/admin/history/workflowinstance/{instance.id}/change/").content.decode()
    assert '<dd class="weave-fact-wide" data-repair="WATCHING">' in page
    pass_repair_checks()
    page = html.unescape(client.get(f"/admin/history/workflowinstance/{instance.id}/change/").content.decode())
    repair = re.search(r'data-repair="INEFFECTIVE"><strong>(.*?)</strong>.*?</dd>', page, re.S)
    assert repair.group(1).startswith("Back in review for the same cause")
    assert "step charge is back in review for the same cause (task_failed_budget_left)" in repair.group(0)
