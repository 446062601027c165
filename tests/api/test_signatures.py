"""GET /v1/signatures and the instance query's signature filter: the causes behind the instances in review."""

import datetime as dt

import pytest
from django.test import override_settings

from core import clock
from engine.demo import demo_run
from engine.instances import instance_pause
from engine.watchdog import pass_watchdog
from history.credentials import credential_issue
from history.models import Application, FailureSignature, Namespace, Scope, WorkflowInstance
from tests.conftest import error_of
from tests.engine.test_watchdog import _control, _started

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewed():
    """The demo's eight instances in review, and a reading token of its namespace."""
    namespace = Namespace.objects.get(name=demo_run(namespace="demo")["namespace"])
    issued = credential_issue(
        namespace_id=namespace.id,
        application_id=Application.objects.filter(namespace=namespace).values_list("id", flat=True).first(),
        actor_id="e" * 32,
        label="signatures",
        scopes=[Scope.READ],
        queue_access="*",
    )
    return WorkflowInstance.objects.filter(namespace=namespace, state="NEEDS_REVIEW"), issued.token


def test_the_signatures_are_listed_latest_first_with_their_counts_and_instances_in_review(call, reviewed):
    reviewed, token = reviewed
    status, body = call("/v1/signatures", token, limit="100")
    assert status == 200
    items = body["data"]["items"]
    assert [i["last_seen"] for i in items] == sorted((i["last_seen"] for i in items), reverse=True)
    assert sum(i["in_review"] for i in items) == reviewed.count()
    first = FailureSignature.objects.get(pk=items[0]["id"])
    assert items[0]["pattern"] == first.pattern and "<*>" in first.pattern
    assert set(items[0]) == {
        "id",
        "definition",
        "step_key",
        "review_cause",
        "pattern",
        "sample",
        "first_seen",
        "last_seen",
        "count",
        "knock_on",
        "in_review",
    }
    # Each signature's id filters the instance query to its instances in review.
    for item in items:
        _, found = call("/v1/workflows", token, signature=item["id"], limit="100")
        expected = reviewed.filter(failure_signature_id=item["id"])
        assert {w["id"] for w in found["data"]["items"]} == set(expected.values_list("id", flat=True))
        _, by_review = call("/v1/workflows", token, signature=item["id"], order="review_since")
        assert len(by_review["data"]["items"]) == item["in_review"]


def test_pages_follow_their_cursor_and_bad_parameters_are_named(call, reviewed):
    _, token = reviewed
    _, first = call("/v1/signatures", token, limit="2")
    _, second = call("/v1/signatures", token, limit="2", cursor=first["data"]["next_cursor"])
    assert not {i["id"] for i in first["data"]["items"]} & {i["id"] for i in second["data"]["items"]}
    assert error_of(call("/v1/signatures", token, signature="x")) == (400, "INVALID_ARGUMENT", "signature")
    assert error_of(call("/v1/workflows", token, signature="nope")) == (400, "INVALID_ARGUMENT", "signature")
    assert error_of(call("/v1/signatures", None))[:2] == (401, "UNAUTHENTICATED")


@override_settings(WEAVE_STALL_PAUSED_SECONDS=3600)
def test_the_instance_query_lists_what_the_watchdog_marked_stalled(call, issue_token, engine):
    with clock.moved(-dt.timedelta(hours=2)):
        paused = _started(engine)
        _control(engine, instance_pause, paused)
    running = _started(engine)
    pass_watchdog()
    token = issue_token(scopes=[Scope.READ]).token
    _, found = call("/v1/workflows", token, stall_reason="paused_too_long")
    assert [w["id"] for w in found["data"]["items"]] == [paused.id] and running.id != paused.id
    _, none = call("/v1/workflows", token, stall_reason="inbox_waiting")
    assert none["data"]["items"] == []
    assert error_of(call("/v1/workflows", token, stall_reason="slow")) == (400, "INVALID_ARGUMENT", "stall_reason")
