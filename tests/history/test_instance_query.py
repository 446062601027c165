"""GET /v1/workflows (the instance query) and GET /v1/workflows/review-summary."""

import datetime as dt
import re
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.http import QueryDict
from django.test.utils import CaptureQueriesContext

from api.instance_filters import instance_query
from core import clock
from core.errors import InvalidArgument
from history.credentials import credential_issue
from history.models import InstanceState, ReviewCause, Scope, StopKind, WorkflowInstance
from history.selectors import instance_list
from history.tenancy import namespace_ensure
from tests.conftest import bearer, error_of
from tests.factories import WorkflowDefinitionFactory, WorkflowInstanceFactory, task_step

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)
ITEM_KEYS = {
    "id",
    "definition",
    "state",
    "paused",
    "business_key",
    "revision",
    "created_at",
    "updated_at",
}


def _at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _time(seconds: int) -> str:
    return _at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def flows(tenancy):
    namespace = tenancy[0]
    return SimpleNamespace(
        pay1=WorkflowDefinitionFactory(namespace=namespace, name="pay", version=1),
        pay2=WorkflowDefinitionFactory(namespace=namespace, name="pay", version=2),
        ship=WorkflowDefinitionFactory(
            namespace=namespace, name="ship", version=1, spec={"steps": [task_step("pack", queue="shipping")]}
        ),
    )


def _instance(definition, *, at: int, **fields):
    fields.setdefault("created_at", _at(at))
    fields.setdefault("updated_at", _at(at + 10))
    return WorkflowInstanceFactory(namespace=definition.namespace, definition=definition, **fields)


def _in_review(definition, *, at: int, cause: str, since: dt.datetime, step: str = "charge", **fields):
    return _instance(
        definition,
        at=at,
        state=InstanceState.NEEDS_REVIEW,
        review_cause=cause,
        review_step_key=step,
        review_since=since,
        review_reason="needs a look",
        **fields,
    )


@pytest.fixture
def rows(flows):
    """Six instances that each filter tells apart (updated_at = created_at + 10 s)."""
    return SimpleNamespace(
        a=_instance(flows.pay1, at=0, business_key="order-1"),
        b=_in_review(flows.pay2, at=1, cause=ReviewCause.TASK_OUTCOME_UNKNOWN, since=_at(5), business_key="order-12"),
        c=_in_review(
            flows.ship,
            at=2,
            cause=ReviewCause.WAIT_EXPIRED,
            since=clock.now() - dt.timedelta(seconds=10),
            step="pack",
            business_key="sale-1",
        ),
        d=_instance(flows.pay1, at=3, paused=True, business_key="order-2"),
        e=_instance(flows.pay1, at=4, state=InstanceState.CANCELLED, stop_kind=StopKind.CANCEL, business_key=""),
        f=_instance(flows.ship, at=5, state=InstanceState.FAILED, stop_kind=StopKind.FAIL, business_key="sale-2"),
    )


def _labels(rows, body) -> list[str]:
    by_id = {row.id: label for label, row in vars(rows).items()}
    return [by_id[item["id"]] for item in body["data"]["items"]]


def test_the_query_lists_visible_instances_newest_updated_first_with_every_item_field(rows, reader, call):
    status, body = call("/v1/workflows", reader)
    assert status == 200
    assert _labels(rows, body) == ["f", "e", "d", "c", "b", "a"]
    assert "next_cursor" not in body["data"]
    items = {item["id"]: item for item in body["data"]["items"]}
    assert items[rows.b.id] == {
        "id": rows.b.id,
        "definition": {"name": "pay", "version": 2},
        "state": "NEEDS_REVIEW",
        "review_cause": "task_outcome_unknown",
        "review_step_key": "charge",
        "paused": False,
        "business_key": "order-12",
        "revision": "1",
        "created_at": "2026-09-18T08:00:01Z",
        "updated_at": "2026-09-18T08:00:11Z",
        "review_since": "2026-09-18T08:00:05Z",
    }
    assert set(items[rows.a.id]) == ITEM_KEYS
    assert items[rows.e.id]["stop_kind"] == "CANCEL" and items[rows.e.id]["business_key"] == ""


def test_a_page_reads_only_what_its_items_show_in_as_many_queries_for_one_item_as_for_six(rows, reader, api):
    def statements(limit: int) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            response = api.get("/v1/workflows", {"limit": limit}, **bearer(reader))
        assert response.status_code == 200
        assert len(response.json()["data"]["items"]) == limit
        return [query["sql"] for query in captured.captured_queries]

    statements(6)  # a process names definitions from what it read once: as one that has run a while
    one, six = statements(1), statements(6)
    assert len(one) == len(six)
    # The documents a list never shows: the instance's input and output, the definition's spec.
    documents = re.compile(r"""\.[`"](input|output|spec)[`"]""")
    assert [sql for sql in six if documents.search(sql)] == []


# Without a filter the page is read with its keys in one prepared statement; paused builds its scan each time.
@pytest.mark.parametrize("query", [{}, {"paused": "true"}], ids=["prepared", "built"])
def test_an_instance_naming_a_definition_that_does_not_exist_makes_its_page_unavailable(rows, reader, call, query):
    assert call("/v1/workflows", reader, **query)[0] == 200
    WorkflowInstance.objects.filter(pk=rows.d.id).update(definition_id="f" * 32)
    assert error_of(call("/v1/workflows", reader, **query)) == (503, "UNAVAILABLE", None)
    assert call("/v1/workflows", reader, state="FAILED")[0] == 200  # a page without it


FILTERS = [
    ({"state": "RUNNING"}, "da"),
    ({"review_cause": "wait_expired"}, "c"),
    ({"definition": "pay"}, "edba"),
    ({"definition": "pay", "version": "2"}, "b"),
    ({"version": "1"}, "fedca"),
    ({"business_key": "order-1"}, "a"),
    ({"business_key_prefix": "order-1"}, "ba"),
    ({"paused": "true"}, "d"),
    ({"paused": "false"}, "fecba"),
    ({"stop_kind": "CANCEL"}, "e"),
    ({"queue": "shipping"}, "fc"),
    ({"queue": "payments"}, "edba"),
    ({"created_after": _time(3)}, "fe"),
    ({"created_before": _time(1)}, "a"),
    ({"updated_after": _time(13)}, "fe"),
    ({"updated_before": _time(11)}, "a"),
    ({"created_after": "2026-09-18T10:00:02+02:00"}, "fed"),
    ({"in_review_longer_than": "3600"}, "b"),
    ({"in_review_longer_than": "0"}, "cb"),
]


@pytest.mark.parametrize(("query", "expected"), FILTERS, ids=[",".join(q) + "=" + e for q, e in FILTERS])
def test_each_filter_keeps_exactly_the_matching_instances(rows, reader, call, query, expected):
    status, body = call("/v1/workflows", reader, **query)
    assert status == 200
    assert _labels(rows, body) == list(expected)


def test_a_repeated_state_or_review_cause_matches_any_of_its_values(rows, reader, call):
    _, body = call("/v1/workflows", reader, state=["FAILED", "RUNNING", "FAILED"])
    assert _labels(rows, body) == ["f", "d", "a"]
    _, body = call("/v1/workflows", reader, review_cause=["wait_expired", "task_outcome_unknown"])
    assert _labels(rows, body) == ["c", "b"]


def test_filters_combine_so_that_every_one_holds(rows, reader, call):
    _, body = call("/v1/workflows", reader, state=["RUNNING", "CANCELLED"], definition="pay", paused="false")
    assert _labels(rows, body) == ["e", "a"]
    _, body = call("/v1/workflows", reader, queue="shipping", state="NEEDS_REVIEW", order="review_since")
    assert _labels(rows, body) == ["c"]
    _, body = call("/v1/workflows", reader, queue="shipping", definition="pay")
    assert _labels(rows, body) == []


def test_an_empty_result_is_an_empty_page_without_a_cursor(rows, reader, call):
    status, body = call("/v1/workflows", reader, definition="nothing-here")
    assert (status, body["data"]) == (200, {"items": []})
    status, body = call("/v1/workflows", reader, business_key="order-404")
    assert (status, body["data"]) == (200, {"items": []})


def _walk(call, token, **query) -> list[str]:
    """Every id of the query, following cursors two at a time."""
    ids, cursor = [], None
    while True:
        extra = {"cursor": cursor} if cursor else {}
        status, body = call("/v1/workflows", token, limit="2", **query, **extra)
        assert status == 200, body
        ids += [item["id"] for item in body["data"]["items"]]
        cursor = body["data"].get("next_cursor")
        if cursor is None:
            return ids


@pytest.mark.parametrize("order", ["updated_at", "created_at", "review_since"])
def test_each_order_runs_newest_first_then_by_id_across_pages(flows, reader, call, order):
    since = clock.now() - dt.timedelta(hours=1)
    made = []
    for index, definition in enumerate([flows.pay1, flows.ship, flows.pay2, flows.pay1, flows.ship]):
        # Pairs share each time, so the id breaks the tie; the times run against the creation order.
        offset = 100 - 10 * (index // 2)
        made.append(
            _in_review(
                definition,
                at=offset,
                cause=ReviewCause.POLL_EXHAUSTED,
                since=since + dt.timedelta(seconds=offset),
                updated_at=_at(offset + 10),
            )
        )
    _instance(flows.pay1, at=50)  # not in review: listed by the time orders only
    key = {"updated_at": "updated_at", "created_at": "created_at", "review_since": "review_since"}[order]
    expected = sorted(made, key=lambda row: (getattr(row, key), row.id), reverse=True)
    ids = _walk(call, reader, order=order, state="NEEDS_REVIEW")
    assert ids == [row.id for row in expected]
    every = _walk(call, reader, order=order)
    assert len(every) == (5 if order == "review_since" else 6)


def test_several_states_are_merged_in_order_across_pages(flows, reader, call):
    made = [_instance(flows.pay1, at=i, state=[InstanceState.RUNNING, InstanceState.FAILED][i % 2]) for i in range(7)]
    _instance(flows.pay1, at=20, state=InstanceState.SUCCEEDED)
    ids = _walk(call, reader, state=["RUNNING", "FAILED"])
    assert ids == [row.id for row in reversed(made)]


def test_a_cursor_answers_only_the_filters_and_order_it_was_made_for(rows, reader, call):
    _, body = call("/v1/workflows", reader, limit="1", definition="pay")
    cursor = body["data"]["next_cursor"]
    status, body = call("/v1/workflows", reader, limit="1", definition="pay", cursor=cursor)
    assert status == 200 and _labels(rows, body) == ["d"]
    for other in (
        {},
        {"definition": "ship"},
        {"definition": "pay", "state": "RUNNING"},
        {"definition": "pay", "order": "created_at"},
    ):
        assert error_of(call("/v1/workflows", reader, limit="1", cursor=cursor, **other)) == (
            400,
            "INVALID_ARGUMENT",
            "cursor",
        ), other


def test_a_cursor_of_another_namespace_is_refused(rows, reader, call):
    other, application, _ = namespace_ensure(name="globex", application="billing", queues=["payments"])
    stranger = credential_issue(
        namespace_id=other.id,
        application_id=application.id,
        actor_id="b" * 32,
        label="test",
        scopes=[Scope.READ],
        queue_access="*",
    ).token
    _, body = call("/v1/workflows", reader, limit="1")
    assert error_of(call("/v1/workflows", stranger, limit="1", cursor=body["data"]["next_cursor"])) == (
        400,
        "INVALID_ARGUMENT",
        "cursor",
    )
    _, body = call("/v1/workflows", stranger)
    assert body["data"]["items"] == []


def test_a_queue_restricted_credential_sees_only_instances_of_its_queues(rows, issue_token, call):
    payments = issue_token(scopes=[Scope.READ], queues=["payments"]).token
    _, body = call("/v1/workflows", payments)
    assert _labels(rows, body) == ["e", "d", "b", "a"]
    _, body = call("/v1/workflows", payments, queue="shipping")
    assert _labels(rows, body) == []
    _, body = call("/v1/workflows", payments, state=["FAILED", "NEEDS_REVIEW"])
    assert _labels(rows, body) == ["b"]


REFUSED = [
    ({"status": "RUNNING"}, "status"),
    ({"definition": ["pay", "ship"]}, "definition"),
    ({"limit": ["2", "3"]}, "limit"),
    ({"state": "DONE"}, "state"),
    ({"state": ""}, "state"),
    ({"review_cause": "tired"}, "review_cause"),
    ({"definition": "Pay"}, "definition"),
    ({"definition": ""}, "definition"),
    ({"version": "0"}, "version"),
    ({"version": "01"}, "version"),
    ({"version": "4294967296"}, "version"),
    ({"business_key": "a\u200bb"}, "business_key"),
    ({"business_key_prefix": "x" * 257}, "business_key_prefix"),
    ({"paused": "yes"}, "paused"),
    ({"stop_kind": "cancel"}, "stop_kind"),
    ({"queue": "no queue"}, "queue"),
    ({"created_after": "2026-09-18"}, "created_after"),
    ({"created_before": "2026-09-18T08:00:00"}, "created_before"),
    ({"updated_after": "2026-13-18T08:00:00Z"}, "updated_after"),
    ({"updated_before": "yesterday"}, "updated_before"),
    ({"in_review_longer_than": "-1"}, "in_review_longer_than"),
    ({"in_review_longer_than": "1.5"}, "in_review_longer_than"),
    ({"order": "-updated_at"}, "order"),
    ({"limit": "0"}, "limit"),
    ({"limit": "101"}, "limit"),
    ({"cursor": "not-a-cursor"}, "cursor"),
    ({"cursor": ""}, "cursor"),
]


@pytest.mark.parametrize(("query", "field"), REFUSED, ids=[f"{f}-{i}" for i, (_, f) in enumerate(REFUSED)])
def test_unknown_repeated_empty_or_malformed_parameters_are_refused_naming_them(rows, reader, call, query, field):
    assert error_of(call("/v1/workflows", reader, **query)) == (400, "INVALID_ARGUMENT", field)


def test_a_querys_verdict_does_not_depend_on_the_queries_checked_before_it():
    """The filters' forms share their fields (api/instance_filters.py): checking one query, refused or not, must
    leave nothing behind that changes the next one's answer."""

    def verdict(query):
        try:
            return instance_query(QueryDict(urlencode(query, doseq=True)))
        except InvalidArgument as refusal:
            return refusal.field, str(refusal)

    queries = [query for query, _ in FILTERS + REFUSED]
    forward = [verdict(query) for query in queries]
    backward = [verdict(query) for query in reversed(queries)]
    assert forward == backward[::-1]
    assert [verdict(query)[0] for query, _ in REFUSED if "limit" not in query and "cursor" not in query] == [
        field for query, field in REFUSED if "limit" not in query and "cursor" not in query
    ]


def test_the_page_size_defaults_to_20_and_reaches_100(flows, reader, call):
    for at in range(21):
        _instance(flows.pay1, at=at)
    _, body = call("/v1/workflows", reader)
    assert len(body["data"]["items"]) == 20 and "next_cursor" in body["data"]
    _, body = call("/v1/workflows", reader, limit="100")
    assert len(body["data"]["items"]) == 21 and "next_cursor" not in body["data"]
    _, body = call("/v1/workflows", reader, limit="1")
    assert len(body["data"]["items"]) == 1


def test_the_query_needs_workflows_read_and_start_keeps_its_own_scope(rows, issue_token, call, api):
    writer = issue_token(scopes=[Scope.WRITE]).token
    assert error_of(call("/v1/workflows", writer)) == (403, "PERMISSION_DENIED", None)
    assert error_of(call("/v1/workflows", None)) == (401, "UNAUTHENTICATED", None)
    reader = issue_token(scopes=[Scope.READ]).token
    response = api.post("/v1/workflows", {}, format="json", **bearer(reader))
    assert response.status_code == 403


def test_the_review_summary_counts_visible_instances_in_review_per_cause_and_definition(rows, flows, reader, call):
    _in_review(flows.pay2, at=30, cause=ReviewCause.TASK_OUTCOME_UNKNOWN, since=_at(40))
    _in_review(flows.pay1, at=31, cause=ReviewCause.TASK_OUTCOME_UNKNOWN, since=_at(41))
    ties = sorted([flows.pay1, flows.ship], key=lambda d: d.id)
    status, body = call("/v1/workflows/review-summary", reader)
    assert status == 200
    assert body["data"] == {
        "total": 4,
        "causes": [
            {"review_cause": "task_outcome_unknown", "count": 3},
            {"review_cause": "wait_expired", "count": 1},
        ],
        "definitions": [
            {"definition": {"name": "pay", "version": 2}, "count": 2},
            # Equal counts run by definition id.
            *({"definition": {"name": d.name, "version": d.version}, "count": 1} for d in ties),
        ],
        "definitions_truncated": False,
    }


def test_the_review_summary_counts_only_what_a_queue_restricted_credential_sees(rows, issue_token, call):
    payments = issue_token(scopes=[Scope.READ], queues=["payments"]).token
    _, body = call("/v1/workflows/review-summary", payments)
    assert body["data"] == {
        "total": 1,
        "causes": [{"review_cause": "task_outcome_unknown", "count": 1}],
        "definitions": [{"definition": {"name": "pay", "version": 2}, "count": 1}],
        "definitions_truncated": False,
    }


def test_the_review_summary_lists_the_busiest_definitions_up_to_its_bound(rows, flows, reader, call, monkeypatch):
    monkeypatch.setattr(instance_list, "SUMMARY_DEFINITIONS", 1)
    _in_review(flows.ship, at=30, cause=ReviewCause.TIMER_LATE, since=_at(40))
    _, body = call("/v1/workflows/review-summary", reader)
    assert body["data"]["definitions"] == [{"definition": {"name": "ship", "version": 1}, "count": 2}]
    assert body["data"]["definitions_truncated"] is True
    assert body["data"]["total"] == 3


def test_the_review_summary_takes_no_parameter_and_is_not_an_instance_id(rows, reader, call):
    assert error_of(call("/v1/workflows/review-summary", reader, limit="1")) == (400, "INVALID_ARGUMENT", "limit")
    _, body = call("/v1/workflows/review-summary", reader)
    assert set(body["data"]) == {"total", "causes", "definitions", "definitions_truncated"}
