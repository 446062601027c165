"""GET /v1/workflows/{id}/events: an instance's timeline, filtered, in sequence order, paged by signed cursors."""

import pytest
from django.db import connection

from engine import runner
from history.credentials import credential_issue
from history.events import KINDS
from history.models import InstanceEvent, Scope
from history.selectors.access import INSTANCE_NOT_FOUND
from history.selectors.events import MAX_SEQUENCE, EventFilters, event_queryset
from history.tenancy import namespace_ensure
from recovery.operations import instance_continue, step_retry
from testkit import requests as rq
from testkit import states
from tests.conftest import bearer, error_of

ITEM_KEYS = {
    "sequence",
    "kind",
    "subject",
    "before",
    "after",
    "detail",
    "actor",
    "operation_id",
    "audit_id",
    "repair",
    "reconstructed",
    "created_at",
    "links",
}


@pytest.fixture
def reviewed(tenancy):
    """A task whose lease expired, reviewed by an operator: task, attempt, result, inbox and audit events."""
    return states.task_reviewed_state(tenancy)


@pytest.fixture
def violated(tenancy):
    """A SIGNAL step whose signal broke its contract, then a second signal buffered: wait and signal events."""
    return states.signal_contract_violation_state(tenancy)


@pytest.fixture
def events_of(call, reader):
    def read(state, token=None, **query):
        status, body = call(f"/v1/workflows/{state.instance.id}/events", token or reader, **query)
        assert status == 200, body
        return body["data"]

    return read


def _sequences(data) -> list[int]:
    return [item["sequence"] for item in data["items"]]


def _all_pages(events_of, state, **query) -> list[dict]:
    items, cursor = [], None
    while True:
        data = events_of(state, **query, **({"cursor": cursor} if cursor else {}))
        items += data["items"]
        cursor = data.get("next_cursor")
        if cursor is None:
            return items


def test_events_run_by_sequence_oldest_first_by_default_and_newest_first_on_request(reviewed, events_of):
    stored = list(InstanceEvent.objects.filter(instance=reviewed.instance).values_list("sequence", flat=True))
    assert len(stored) > 10
    oldest_first = events_of(reviewed, limit="100")
    assert _sequences(oldest_first) == list(range(1, len(stored) + 1))
    assert oldest_first["workflow_id"] == reviewed.instance.id
    assert oldest_first["revision"] == str(reviewed.instance.revision)
    assert _sequences(events_of(reviewed, limit="100", order="desc")) == list(range(len(stored), 0, -1))
    assert _sequences(events_of(reviewed, limit="100", order="asc")) == list(range(1, len(stored) + 1))


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_pages_follow_their_cursor_in_either_order_without_gap_or_repeat(reviewed, events_of, order):
    whole = events_of(reviewed, limit="100", order=order)["items"]
    paged = _all_pages(events_of, reviewed, limit="3", order=order)
    assert paged == whole
    assert len(events_of(reviewed, limit="3", order=order)["items"]) == 3


def test_the_default_page_holds_twenty_events(reviewed, events_of):
    first = events_of(reviewed)
    assert _sequences(first) == list(range(1, 21)) and "next_cursor" in first


def test_the_kind_filter_keeps_only_the_named_kinds_and_may_be_repeated(reviewed, events_of):
    one = events_of(reviewed, limit="100", kind="task.state")["items"]
    assert one and {item["kind"] for item in one} == {"task.state"}
    both = events_of(reviewed, limit="100", kind=["task.state", "attempt.state"])["items"]
    assert {item["kind"] for item in both} == {"task.state", "attempt.state"}
    assert len(both) == len(one) + len(events_of(reviewed, limit="100", kind="attempt.state")["items"])
    assert _sequences({"items": both}) == sorted(_sequences({"items": both}))
    assert events_of(reviewed, limit="100", kind=["task.state", "task.state"])["items"] == one


def test_the_step_key_filter_keeps_only_that_steps_events(violated, events_of):
    everything = events_of(violated, limit="100")["items"]
    step = violated.step.key
    of_step = events_of(violated, limit="100", step_key=step)["items"]
    assert of_step == [item for item in everything if item["subject"].get("step_key") == step]
    assert {item["subject"]["type"] for item in of_step} >= {"step", "activation", "wait", "signal", "inbox"}
    assert len(of_step) < len(everything)
    assert events_of(violated, step_key="refund")["items"] == []


def test_the_root_step_is_a_step_key_the_filter_accepts(violated, events_of):
    (created,) = events_of(violated, step_key="$root", kind="step.created")["items"]
    assert (created["subject"]["step_key"], created["after"]) == ("$root", "ACTIVE")


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_after_sequence_keeps_only_later_events(reviewed, events_of, order):
    later = events_of(reviewed, limit="100", after_sequence="5", order=order)
    everything = InstanceEvent.objects.filter(instance=reviewed.instance).count()
    assert sorted(_sequences(later)) == list(range(6, everything + 1))
    assert events_of(reviewed, limit="100", after_sequence="0") == events_of(reviewed, limit="100")


def test_filters_combine_and_page_together(reviewed, events_of):
    query = {"kind": ["task.state", "result.created", "step.state"], "step_key": reviewed.step.key}
    whole = events_of(reviewed, limit="100", after_sequence="3", order="desc", **query)["items"]
    assert whole and all(
        item["kind"] in query["kind"] and item["subject"]["step_key"] == reviewed.step.key and item["sequence"] > 3
        for item in whole
    )
    assert _all_pages(events_of, reviewed, limit="2", after_sequence="3", order="desc", **query) == whole


def test_an_empty_page_has_no_items_and_no_cursor(reviewed, events_of):
    last = InstanceEvent.objects.filter(instance=reviewed.instance).count()
    data = events_of(reviewed, after_sequence=str(last))
    assert data == {"workflow_id": reviewed.instance.id, "revision": str(reviewed.instance.revision), "items": []}
    assert events_of(reviewed, kind="signal.created")["items"] == []


def test_the_last_page_has_no_cursor(reviewed, events_of):
    last = InstanceEvent.objects.filter(instance=reviewed.instance).count()
    data = events_of(reviewed, after_sequence=str(last - 2), limit="2")
    assert _sequences(data) == [last - 1, last] and "next_cursor" not in data


# (query the cursor was made with, query it is reused with)
REBOUND = [
    ({}, {"order": "desc"}),
    ({"order": "desc"}, {"order": "asc"}),
    ({}, {"kind": "task.state"}),
    ({"kind": ["task.state", "attempt.state"]}, {"kind": "task.state"}),
    ({}, {"step_key": "charge"}),
    ({"step_key": "charge"}, {}),
    ({}, {"after_sequence": "1"}),
    ({"after_sequence": "1"}, {"after_sequence": "2"}),
]


@pytest.mark.parametrize(("made", "reused"), REBOUND)
def test_a_cursor_reused_with_other_filters_or_order_is_400_naming_the_cursor(reviewed, call, reader, made, reused):
    path = f"/v1/workflows/{reviewed.instance.id}/events"
    _, body = call(path, reader, limit="1", **made)
    cursor = body["data"]["next_cursor"]
    assert call(path, reader, limit="1", cursor=cursor, **made)[0] == 200
    assert error_of(call(path, reader, limit="1", cursor=cursor, **reused)) == (400, "INVALID_ARGUMENT", "cursor")


def test_the_same_kinds_in_another_order_keep_the_cursor_valid(reviewed, call, reader):
    path = f"/v1/workflows/{reviewed.instance.id}/events"
    kinds = ["task.state", "attempt.state", "step.state"]
    _, body = call(path, reader, limit="1", kind=kinds)
    status, again = call(path, reader, limit="1", kind=kinds[::-1], cursor=body["data"]["next_cursor"])
    assert status == 200 and again["data"]["items"][0]["sequence"] > body["data"]["items"][0]["sequence"]


def test_a_cursor_of_another_instance_is_400_naming_the_cursor(reviewed, violated, call, reader):
    _, body = call(f"/v1/workflows/{reviewed.instance.id}/events", reader, limit="1")
    moved = call(f"/v1/workflows/{violated.instance.id}/events", reader, limit="1", cursor=body["data"]["next_cursor"])
    assert error_of(moved) == (400, "INVALID_ARGUMENT", "cursor")


BAD = [
    ({"kind": "task.done"}, "kind"),
    ({"kind": ""}, "kind"),
    ({"kind": ["task.state", "Task.state"]}, "kind"),
    ({"step_key": ""}, "step_key"),
    ({"step_key": "-charge"}, "step_key"),
    ({"step_key": "k" * 65}, "step_key"),
    ({"step_key": "$ROOT"}, "step_key"),
    ({"step_key": ["charge", "charge"]}, "step_key"),
    ({"after_sequence": ""}, "after_sequence"),
    ({"after_sequence": "-1"}, "after_sequence"),
    ({"after_sequence": "01"}, "after_sequence"),
    ({"after_sequence": "1.5"}, "after_sequence"),
    ({"after_sequence": "+1"}, "after_sequence"),
    ({"after_sequence": "٣"}, "after_sequence"),
    ({"after_sequence": str(MAX_SEQUENCE + 1)}, "after_sequence"),
    ({"after_sequence": ["1", "2"]}, "after_sequence"),
    ({"order": "ASC"}, "order"),
    ({"order": ""}, "order"),
    ({"order": ["asc", "desc"]}, "order"),
    ({"sequence": "1"}, "sequence"),
    ({"kinds": "task.state"}, "kinds"),
]


@pytest.mark.parametrize(("query", "field"), BAD, ids=[f"{list(q.items())}" for q, _ in BAD])
def test_a_bad_filter_or_an_unknown_or_repeated_parameter_is_400_naming_it(reviewed, call, reader, query, field):
    assert error_of(call(f"/v1/workflows/{reviewed.instance.id}/events", reader, **query)) == (
        400,
        "INVALID_ARGUMENT",
        field,
    )


def test_the_largest_sequence_is_a_valid_after_sequence(reviewed, events_of):
    assert events_of(reviewed, after_sequence=str(MAX_SEQUENCE))["items"] == []


def test_every_kind_the_timeline_writes_is_a_valid_filter(reviewed, events_of):
    assert events_of(reviewed, kind=list(KINDS), limit="100") == events_of(reviewed, limit="100")


def test_an_instance_behind_an_inaccessible_queue_is_not_found(reviewed, call, issue_token):
    token = issue_token(scopes=[Scope.READ], queues=["ledger"]).token
    status, body = call(f"/v1/workflows/{reviewed.instance.id}/events", token)
    assert (status, body["error"]) == (404, {"code": "NOT_FOUND", "message": INSTANCE_NOT_FOUND})


def test_an_instance_of_another_namespace_is_not_found(reviewed, call):
    namespace, application, _ = namespace_ensure(name="elsewhere", application="other", queues=["payments"])
    token = credential_issue(
        namespace_id=namespace.id,
        application_id=application.id,
        actor_id="c" * 32,
        label="elsewhere",
        scopes=[Scope.READ],
        queue_access="*",
    ).token
    status, body = call(f"/v1/workflows/{reviewed.instance.id}/events", token)
    assert (status, body["error"]) == (404, {"code": "NOT_FOUND", "message": INSTANCE_NOT_FOUND})


def test_an_unknown_instance_is_the_same_not_found(call, reader):
    status, body = call(f"/v1/workflows/{'e' * 32}/events", reader)
    assert (status, body["error"]) == (404, {"code": "NOT_FOUND", "message": INSTANCE_NOT_FOUND})


def test_an_item_has_no_payload_and_leaves_out_what_it_has_no_value_for(reviewed, events_of):
    items = events_of(reviewed, limit="100")["items"]
    assert all(set(item) <= ITEM_KEYS for item in items)
    created = next(item for item in items if item["kind"] == "instance.created")
    assert "before" not in created and created["after"] == "RUNNING"
    assert created["subject"] == {"type": "instance", "id": reviewed.instance.id}
    assert created["actor"]["kind"] and created["reconstructed"] is False
    audit = next(item for item in items if item["kind"] == "audit.created" and item["detail"] == "task.review")
    assert "before" not in audit and "after" not in audit
    assert audit["audit_id"] == audit["subject"]["id"] and len(audit["operation_id"]) == 32
    review = next(item for item in items if item["kind"] == "instance.state" and item["after"] == "NEEDS_REVIEW")
    stored = InstanceEvent.objects.get(instance=reviewed.instance, sequence=review["sequence"])
    assert (review["before"], review.get("detail")) == (stored.before, stored.detail or None)


def test_the_changes_a_repair_made_are_marked_with_its_operation_and_the_engines_are_not(tenancy, events_of):
    """Who repaired what: every event the operator's RetryStep and Continue wrote names its operation; the engine's
    and the worker's own, before and after (the failure, the retried task's claim), name none."""
    state = states.task_failed_state(tenancy)
    engine = states._engine(tenancy)
    retried = rq.run(step_retry, engine.identity, state, rq.retry(state), key="retry")
    continued = rq.run(instance_continue, engine.identity, state, rq.continue_(state), key="continue")
    runner.runner_settle()
    engine.work()
    items = _all_pages(events_of, state)
    repairs = {(item["repair"], item["operation_id"]) for item in items if "repair" in item}
    assert repairs == {("retry-step", retried.data["operation_id"]), ("continue", continued.data["operation_id"])}
    retry_kinds = {item["kind"] for item in items if item.get("repair") == "retry-step"}
    assert {"activation.created", "task.created", "audit.created"} <= retry_kinds
    last_repair = max(item["sequence"] for item in items if "repair" in item)
    natural = {(item["kind"], item.get("after"), item["actor"]["kind"]) for item in items if "repair" not in item}
    assert ("task.state", "FAILED", "worker") in natural and ("instance.state", "NEEDS_REVIEW", "engine") in natural
    later = [item for item in items if item["sequence"] > last_repair]
    # The retried task, claimed by a worker after the repairs: its own change, not one a person made.
    assert any(item["kind"] == "task.state" and item["after"] == "LEASED" for item in later)
    assert all("repair" not in item for item in later)


def _links(items) -> dict[str, dict]:
    """The links of the first event of each (kind, detail)."""
    found: dict[str, dict] = {}
    for item in items:
        found.setdefault(f"{item['kind']}:{item.get('detail', '')}", item["links"])
    return found


def test_each_event_links_to_the_detail_reads_of_its_subject(reviewed, events_of):
    w = f"/v1/workflows/{reviewed.instance.id}"
    step, activation, task = reviewed.step, reviewed.activation, reviewed.task
    links = _links(events_of(reviewed, limit="100")["items"])
    assert links["instance.created:"] == {"workflow": w}
    assert links["step.state:"] == {"activations": f"{w}/steps/{step.key}/activations"}
    assert links["activation.created:"] == {"activation": f"{w}/steps/{step.key}/activations/{activation.id}"}
    for kind in (
        "task.created:",
        "attempt.created:",
        "result.created:UNKNOWN",
        "inbox.created:",
        "audit.created:task.review",
    ):
        assert links[kind] == {"task": f"{w}/tasks/{task.id}"}, kind
    assert links["audit.created:workflow.start"] == {"operations": f"{w}/operations"}
    assert links["audit.created:workflow.review_task"] == {"operations": f"{w}/operations"}


def test_wait_signal_and_signal_audit_events_link_to_their_reads(violated, events_of):
    w = f"/v1/workflows/{violated.instance.id}"
    signal = violated.signals[0]
    activation = f"{w}/steps/{violated.step.key}/activations/{violated.activation.id}"
    links = _links(events_of(violated, limit="100")["items"])
    assert links["wait.created:"] == {"activation": activation}
    assert links["signal.created:"] == {"signal": f"{w}/signals/{signal.id}"}
    assert links["inbox.created:"] == {"signal": f"{w}/signals/{signal.id}"}
    operation = links["audit.created:workflow.signal"]
    assert operation["signal"] == f"{w}/signals/{signal.id}"
    assert operation["signal_operation"].startswith(f"{w}/signals/{signal.id}/operations/")


def test_every_link_answers_its_read(reviewed, violated, events_of, api, issue_token):
    token = issue_token(scopes=[Scope.READ, Scope.AUDIT_READ]).token
    for state in (reviewed, violated):
        paths = {path for item in events_of(state, limit="100")["items"] for path in item["links"].values()}
        assert len(paths) > 4
        for path in paths:
            assert api.get(path, **bearer(token)).status_code == 200, path


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({}, "event_instance_sequence"),
        ({"kinds": ("task.state",)}, "event_instance_kind"),
        ({"step_key": "charge"}, "event_instance_step"),
    ],
)
def test_each_timeline_filter_is_served_by_its_index_on_mariadb(reviewed, filters, index):
    if connection.vendor != "mysql":
        pytest.skip("the plan that matters is MariaDB's")
    keys = (
        event_queryset(instance_id=reviewed.instance.id, filters=EventFilters(**filters))
        .order_by("sequence")
        .values_list("pk", flat=True)
    )
    sql, params = keys[:21].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [c[0] for c in cursor.description]
        (plan,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    assert plan["key"] == index and "filesort" not in (plan["Extra"] or ""), plan
