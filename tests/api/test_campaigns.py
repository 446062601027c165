"""Repair campaigns over HTTP: the list, one campaign with its counts, its ledger by outcome and cursor, and the
moves, with their refusals named."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine.runner import runner_settle
from history.models import ApprovalPolicy, CampaignState, Scope, WorkflowInstance
from recovery.campaigns import campaign_make
from tests.conftest import bearer, error_of
from tests.recovery.test_campaigns import _command, _operator, _unknown

pytestmark = pytest.mark.django_db


def _made(tenancy, n=3, **fields):
    instances = _unknown(tenancy, n)
    return campaign_make(
        identity=_operator(tenancy),
        instances=WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances]),
        source="a test's selection",
        command=_command(**fields),
        owner="olga",
    )


def _move(api, token, campaign_id, action, **body):
    response = api.post(
        f"/v1/campaigns/{campaign_id}/{action}", data=json.dumps(body), content_type="application/json", **bearer(token)
    )
    return response.status_code, json.loads(response.content)


def test_a_campaign_is_listed_read_and_moved_and_its_ledger_follows_it(api, call, tenancy, issue_token):
    campaign = _made(tenancy, canary_size=1)
    reader = issue_token(scopes=[Scope.READ]).token
    recoverer = issue_token(scopes=[Scope.RECOVER, Scope.READ], actor_id="d" * 32).token
    status, body = call("/v1/campaigns", reader)
    assert status == 200 and [c["id"] for c in body["data"]["items"]] == [campaign.id]
    listed = body["data"]["items"][0]
    assert (listed["state"], listed["total"], listed["counts"]["PENDING"]) == ("READY", 3, 3)
    assert listed["decision"]["kind"] == "conclude" and "approval" not in listed and "finished_at" not in listed
    assert error_of(_move(api, reader, campaign.id, "start")) == (403, "PERMISSION_DENIED", None)
    status, moved = _move(api, recoverer, campaign.id, "start", note="preview read")
    assert status == 200 and moved["data"]["state"] == "RUNNING"
    runner_settle()  # the canary's repair worked: it widened itself and decided the rest
    _, one = call(f"/v1/campaigns/{campaign.id}", reader)
    assert (one["data"]["widened"], one["data"]["counts"]["APPLIED"]) == (True, 3)
    assert one["data"]["verification"] == {"WATCHING": 0, "EFFECTIVE": 3, "INEFFECTIVE": 0, "REGRESSED": 0}
    _, page = call(f"/v1/campaigns/{campaign.id}/items", reader, limit="2")
    first = page["data"]["items"]
    assert [i["position"] for i in first] == [0, 1] and {i["outcome"] for i in first} == {"APPLIED"}
    assert first[0]["decision_id"] and first[0]["done_at"] and first[0]["revision"].isdigit()
    _, rest = call(f"/v1/campaigns/{campaign.id}/items", reader, limit="2", cursor=page["data"]["next_cursor"])
    assert [i["position"] for i in rest["data"]["items"]] == [2] and "next_cursor" not in rest["data"]
    _, none = call(f"/v1/campaigns/{campaign.id}/items", reader, outcome="REFUSED")
    assert none["data"]["items"] == []
    _, done = call(f"/v1/campaigns/{campaign.id}", reader)
    assert done["data"]["state"] == "DONE" and done["data"]["finished_at"]


def test_bad_requests_are_named_and_a_campaign_beyond_reach_is_not_found(api, call, tenancy, issue_token):
    campaign = _made(tenancy, n=1)
    reader = issue_token(scopes=[Scope.READ]).token
    narrow = issue_token(scopes=[Scope.READ, Scope.RECOVER], queues=["ledger"]).token
    assert error_of(call(f"/v1/campaigns/{campaign.id}/items", reader, outcome="DONE")) == (
        400,
        "INVALID_ARGUMENT",
        "outcome",
    )
    assert error_of(call(f"/v1/campaigns/{campaign.id}", reader, x="1")) == (400, "INVALID_ARGUMENT", "x")
    assert error_of(call("/v1/campaigns/nope", reader)) == (400, "INVALID_ARGUMENT", "campaign_id")
    assert error_of(call(f"/v1/campaigns/{campaign.id}", narrow))[:2] == (404, "NOT_FOUND")
    assert call("/v1/campaigns", narrow)[1]["data"]["items"] == []
    recoverer = issue_token(scopes=[Scope.RECOVER]).token
    assert error_of(_move(api, recoverer, campaign.id, "widen")) == (400, "FAILED_PRECONDITION", None)
    assert error_of(_move(api, recoverer, campaign.id, "start", reason="x")) == (400, "INVALID_ARGUMENT", "reason")


def test_under_four_eyes_the_maker_cannot_approve_over_the_api(api, tenancy, issue_token):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task", approvals_required=1)
    campaign = _made(tenancy, n=2, canary_size=1)
    assert campaign.state == CampaignState.PROPOSED
    maker = issue_token(scopes=[Scope.RECOVER], actor_id="d" * 32).token
    assert error_of(_move(api, maker, campaign.id, "approve"))[:2] == (403, "PERMISSION_DENIED")
    approver = issue_token(scopes=[Scope.RECOVER], actor_id="f" * 32).token
    status, body = _move(api, approver, campaign.id, "approve")
    assert status == 200 and body["data"]["state"] == "READY" and body["data"]["approval"]["by"] == "f" * 32
    _move(api, maker, campaign.id, "start")
    runner_settle()  # under four eyes the canary waits for the second person, whatever its verdicts
    assert error_of(_move(api, maker, campaign.id, "widen"))[:2] == (403, "PERMISSION_DENIED")
    status, body = _move(api, approver, campaign.id, "widen", note="the canary's repair worked")
    assert (status, body["data"]["state"], body["data"]["widened"]) == (200, "RUNNING", True)


def test_the_list_reads_a_constant_number_of_queries_however_many_campaigns_it_holds(call, tenancy, issue_token):
    reader = issue_token(scopes=[Scope.READ]).token

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert call("/v1/campaigns", reader, limit="100")[0] == 200
        return len(captured)

    _made(tenancy, n=1)
    one = queries()
    for _ in range(3):
        _made(tenancy, n=1)
    assert queries() == one
