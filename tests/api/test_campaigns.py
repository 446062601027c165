"""Repair campaigns over HTTP: the list, one campaign with its counts, its ledger by outcome and cursor, and the
moves, with their refusals named."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine.runner import runner_settle
from history.models import (
    ApprovalPolicy,
    Campaign,
    CampaignItem,
    CampaignState,
    IdempotencyReceipt,
    Scope,
    WorkflowInstance,
)
from recovery.campaigns import MAKE, campaign_make
from testkit import states
from testkit.driver import Engine
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


def _make(api, token, body, key="make-1"):
    response = api.post(
        "/v1/campaigns",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **bearer(token),
    )
    return response, json.loads(response.content)


def test_a_campaign_made_over_the_api_freezes_its_named_instances_once_per_key(api, tenancy, issue_token):
    first, second, third = _unknown(tenancy, 3)
    WorkflowInstance.objects.filter(pk=second.pk).update(business_key="order-2")
    token = issue_token(scopes=[Scope.RECOVER], actor_id="d" * 32).token
    body = _command(canary_size=1) | {"selection": {"workflows": [first.id, "order-2"]}}
    response, made = _make(api, token, body)
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    campaign = made["data"]
    assert (campaign["state"], campaign["total"], campaign["counts"]["PENDING"]) == ("READY", 2, 2)
    assert campaign["owner"] == "d" * 32 and campaign["source"] == "2 ids and business keys named"
    frozen = CampaignItem.objects.filter(campaign_id=campaign["id"]).values_list("instance_id", "revision")
    assert set(frozen) == {(first.id, first.revision), (second.id, second.revision)}
    # The same key and body: the same campaign, as it is now; another body under that key is refused.
    again, replayed = _make(api, token, body)
    assert (again.status_code, again["Idempotent-Replayed"], replayed["data"]["id"]) == (200, "true", campaign["id"])
    other = body | {"selection": {"workflows": [third.id]}}
    refused, answer = _make(api, token, other)
    assert error_of((refused.status_code, answer))[:2] == (409, "ALREADY_EXISTS")
    assert Campaign.objects.count() == 1


def test_a_campaign_selected_by_the_instance_query_takes_every_page_of_it(api, tenancy, issue_token):
    in_review = _unknown(tenancy, 3)
    running = states.started(Engine(*tenancy), 1)
    token = issue_token(scopes=[Scope.RECOVER]).token
    query = {"state": ["NEEDS_REVIEW"], "review_cause": "task_outcome_unknown", "paused": False}
    response, made = _make(api, token, _command() | {"selection": {"query": query}})
    assert response.status_code == 201 and made["data"]["total"] == 3
    selected = set(CampaignItem.objects.values_list("instance_id", flat=True))
    assert selected == {i.id for i in in_review} and running[0].id not in selected
    assert "state=NEEDS_REVIEW" in made["data"]["source"]


@pytest.mark.parametrize(
    ("selection", "status", "field"),
    [
        ({}, 400, "selection"),
        ({"workflows": ["x"], "query": {"state": "NEEDS_REVIEW"}}, 400, "selection"),
        ({"workflows": []}, 400, "selection.workflows"),
        ({"workflows": ["ok", " "]}, 400, "selection.workflows[1]"),
        ({"query": {}}, 400, "selection.query"),
        ({"query": {"order": "created_at"}}, 400, "selection.query.order"),
        ({"query": {"state": "DONE"}}, 400, "selection.query.state"),
        ({"query": {"created_after": "yesterday"}}, 400, "selection.query.created_after"),
        ({"query": {"version": 1.5}}, 400, "selection.query.version"),
        ({"workflows": ["e" * 32, "no-such-key"]}, 404, "selection.workflows"),
        ({"query": {"business_key": "no-such-key"}}, 404, "selection"),
    ],
)
def test_a_bad_or_empty_selection_is_refused_naming_it_and_nothing_is_made(
    api, tenancy, issue_token, selection, status, field
):
    _unknown(tenancy, 1)
    token = issue_token(scopes=[Scope.RECOVER]).token
    answer = _make(api, token, _command() | {"selection": selection})
    assert error_of((answer[0].status_code, answer[1]))[::2] == (status, field)
    assert not Campaign.objects.exists() and not IdempotencyReceipt.objects.filter(operation=MAKE).exists()


def test_the_unknown_names_are_listed_by_their_index(api, tenancy, issue_token):
    (known,) = _unknown(tenancy, 1)
    token = issue_token(scopes=[Scope.RECOVER]).token
    answer = _make(api, token, _command() | {"selection": {"workflows": [known.id, "order-9", "e" * 32]}})[1]
    assert "[1] order-9; [2] " + "e" * 32 in answer["error"]["message"]


def test_a_command_without_a_body_is_refused_naming_the_body(api, tenancy, issue_token):
    campaign = _made(tenancy, n=1)
    token = issue_token(scopes=[Scope.RECOVER]).token
    response = api.post(f"/v1/campaigns/{campaign.id}/start", **bearer(token))
    assert error_of((response.status_code, json.loads(response.content))) == (400, "INVALID_ARGUMENT", "body")
    assert error_of(_move(api, token, campaign.id, "start", note=" ")) == (400, "INVALID_ARGUMENT", "note")
