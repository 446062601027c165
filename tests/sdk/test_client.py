"""The SDK on its own, against httpx.MockTransport: validation, decoding, checks, retries."""

import json
import subprocess
import sys

import httpx
import pytest
from weave_sdk import (
    InvalidArgument,
    NotFound,
    RawJSON,
    WeaveNetworkError,
    WeaveResponseError,
    types,
)
from weave_sdk.exactjson import loads

from tests.sdk.mock import WORKFLOW, Server, Waits, client_for

W, S, A, G = "1" * 32, "2" * 32, "3" * 32, "9" * 32
ITEM = {
    "id": A,
    "step_id": S,
    "sequence": 1,
    "state": "FAILED",
    "revision": "3",
    "task_id": "5" * 32,
    "created_at": "2026-09-18T08:00:00Z",
    "updated_at": "2026-09-18T08:00:01.000500Z",
}
PAGE = {"instance_id": W, "revision": "12", "step_id": S, "items": [ITEM]}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.get_workflow("A" * 32), "id"),
        (lambda c: c.get_workflow("1" * 31), "id"),
        (lambda c: c.list_workflow_activations(W, "$root"), "key"),
        (lambda c: c.list_workflow_activations(W, "-x"), "key"),
        (lambda c: c.list_workflow_activations(W, "k" * 65), "key"),
        (lambda c: c.get_workflow_activation(W, "charge", "nope"), "activation"),
        (lambda c: c.list_workflow_signals(W, limit=0), "limit"),
        (lambda c: c.list_workflow_signals(W, limit=101), "limit"),
        (lambda c: c.list_workflow_signals(W, limit=True), "limit"),
        (lambda c: c.list_workflow_signals(W, limit="5"), "limit"),
        (lambda c: c.list_workflow_signals(W, cursor="x" * 1025), "cursor"),
        (lambda c: c.list_workflow_signals(W, cursor=5), "cursor"),
        (lambda c: c.get_workflow_signal_operation(W, G, "op"), "operation"),
        (lambda c: c.get_workflow_task(W, ""), "task"),
        (lambda c: c.retry_step(W, idempotency_key="", command={}), "Idempotency-Key"),
        (lambda c: c.retry_step(W, idempotency_key="a b", command={}), "Idempotency-Key"),
        (lambda c: c.recover(W, "retry_step", idempotency_key="k1", command={}), "operation"),
        (lambda c: c.approve_proposal(W, "p-1", idempotency_key="k1"), "proposal_id"),
        (lambda c: c.reject_proposal(W, G, idempotency_key="", reason="no"), "Idempotency-Key"),
    ],
)
def test_invalid_ids_keys_limits_and_cursors_are_refused_before_sending(call, field):
    server = Server((200, {}))
    with pytest.raises(InvalidArgument) as refused:
        call(client_for(server))
    assert (refused.value.field, refused.value.status, refused.value.code) == (field, None, "INVALID_ARGUMENT")
    assert server.requests == []


def test_limit_none_leaves_the_parameter_out_and_an_empty_cursor_means_page_one():
    server = Server((200, PAGE))
    client = client_for(server)
    client.list_workflow_activations(W, "charge", limit=None, cursor="")
    client.list_workflow_activations(W, "charge", limit=5, cursor="abc:def")
    assert [dict(r.url.params) for r in server.requests] == [{}, {"limit": "5", "cursor": "abc:def"}]
    assert server.requests[0].url.path == f"/v1/workflows/{W}/steps/charge/activations"
    assert server.requests[0].headers["Authorization"] == "Bearer weave_token"


def test_revisions_decode_to_int_times_to_utc_and_optional_fields_to_none():
    page = client_for(Server((200, PAGE))).list_workflow_activations(W, "charge")
    (item,) = page.items
    assert (page.revision, item.revision, item.sequence) == (12, 3, 1)
    assert item.updated_at.microsecond == 500 and item.updated_at.utcoffset().total_seconds() == 0
    assert page.next_cursor is None and page.current_activation_id is None and item.completed_at is None


def _detail(output_text):
    step = {"id": S, "key": "charge", "kind": "TASK", "state": "ACTIVE", "revision": "2"}
    text = (
        f'{{"request_id":"{"a" * 32}","data":{{"instance_id":"{W}","revision":"12","step":{json.dumps(step)},'
        f'"activation":{json.dumps(ITEM)},"input":{{"amount":1.10,"n":12345678901234567890123}}{output_text}}}}}'
    )
    return client_for(Server((200, text))).get_workflow_activation(W, "charge", A)


def test_client_json_is_kept_exact_and_an_absent_output_differs_from_null():
    absent = _detail("")
    assert absent.input == RawJSON('{"amount":1.10,"n":12345678901234567890123}')
    assert str(absent.input.value()["amount"]) == "1.10" and absent.input.value()["n"] == 12345678901234567890123
    assert absent.output is None
    assert _detail(',"output":null').output == RawJSON("null")
    assert _detail(',"output": {"x": 1.50}').output == RawJSON('{"x": 1.50}')


@pytest.mark.parametrize(
    ("call", "body"),
    [
        (lambda c: c.list_workflow_activations(W, "charge"), PAGE | {"instance_id": G}),
        (lambda c: c.list_workflow_activations(W, "charge"), PAGE | {"items": [ITEM | {"step_id": G}]}),
        (lambda c: c.list_workflow_signals(W), {"workflow_id": G, "revision": "1", "items": []}),
        (
            lambda c: c.list_workflow_poll_rounds(W, "settle", A),
            {"instance_id": W, "revision": "1", "activation_id": G, "items": []},
        ),
        (
            lambda c: c.list_workflow_signal_operations(W, G),
            {
                "items": [
                    {
                        "id": A,
                        "workflow_id": W,
                        "signal_id": "8" * 32,
                        "operation_id": A,
                        "actor_id": A,
                        "action": "workflow.signal",
                        "created_at": "2026-09-18T08:00:00Z",
                    }
                ]
            },
        ),
    ],
)
def test_an_answer_whose_parent_ids_do_not_match_the_request_is_an_error(call, body):
    with pytest.raises(WeaveResponseError) as refused:
        call(client_for(Server((200, body))))
    assert refused.value.code == "RESPONSE_MISMATCH"


@pytest.mark.parametrize("revision", ["012", "0", 12, "18446744073709551616", "1.0"])
def test_a_revision_that_is_not_a_decimal_string_is_a_response_error(revision):
    with pytest.raises(WeaveResponseError):
        client_for(Server((200, PAGE | {"revision": revision}))).list_workflow_activations(W, "charge")


def test_an_error_answer_raises_with_code_message_field_request_id_and_status():
    body = '{"request_id":"' + "b" * 32 + '","error":{"code":"NOT_FOUND","message":"workflow not found"}}'
    with pytest.raises(NotFound) as refused:
        client_for(Server((404, body))).get_workflow(W)
    error = refused.value
    assert (error.code, error.message, error.field, error.request_id, error.status) == (
        "NOT_FOUND",
        "workflow not found",
        None,
        "b" * 32,
        404,
    )


def test_a_workflow_in_review_decodes_its_review_cause_step_and_time():
    body = WORKFLOW | {
        "state": "NEEDS_REVIEW",
        "review_reason": "the outcome of task x of step charge is unknown (lease expired)",
        "review_cause": "task_outcome_unknown",
        "review_step_key": "charge",
        "review_since": "2026-09-18T08:00:01Z",
    }
    workflow = client_for(Server((200, body))).get_workflow(W)
    assert (workflow.review_cause, workflow.review_step_key) == ("task_outcome_unknown", "charge")
    assert workflow.review_since.isoformat() == "2026-09-18T08:00:01+00:00"
    review = ("review_reason", "review_cause", "review_step_key", "review_since")
    running = {key: value for key, value in body.items() if key not in review} | {"state": "RUNNING"}
    workflow = client_for(Server((200, running))).get_workflow(W)
    assert (workflow.review_cause, workflow.review_step_key, workflow.review_since) == (None, None, None)


def test_a_succeeded_workflow_decodes_its_output_exact_and_one_without_output_has_none():
    data = json.dumps(WORKFLOW | {"state": "SUCCEEDED"})[:-1] + ',"output":{"charge":{"amount":1.10}}}'
    workflow = client_for(Server((200, f'{{"request_id":"{"a" * 32}","data":{data}}}'))).get_workflow(W)
    assert workflow.output == RawJSON('{"charge":{"amount":1.10}}')
    assert client_for(Server((200, WORKFLOW))).get_workflow(W).output is None


def test_a_network_error_on_a_read_re_reads_the_same_resource():
    server = Server((0, httpx.ConnectError("down")), (200, PAGE))
    page = client_for(server).list_workflow_activations(W, "charge", limit=1, cursor="c:1")
    assert page.instance_id == W
    assert [str(r.url) for r in server.requests] == [str(server.requests[0].url)] * 2


def test_a_read_that_keeps_failing_raises_a_network_error_after_the_retries():
    server, waits = Server((0, httpx.ReadTimeout("slow"))), Waits()
    with pytest.raises(WeaveNetworkError):
        client_for(server, waits, attempts=3).get_workflow(W)
    assert len(server.requests) == 3 and len(waits.waited) == 2


def test_a_write_is_re_sent_only_with_its_own_idempotency_key():
    receipt = {
        "operation_id": A,
        "operation": "retry_step",
        "workflow_id": W,
        "revision": "8",
        "control_revision": "3",
        "state": "NEEDS_REVIEW",
        "paused": False,
        "activation_sequence": 2,
    }
    server = Server((0, httpx.ConnectError("down")), (200, receipt), headers={"Idempotent-Replayed": "true"})
    command = {"expected_revision": "7", "result": RawJSON('{"paid":1.10}')}
    answer = client_for(server).retry_step(W, idempotency_key="key-1", command=command)
    assert (answer.data.revision, answer.data.activation_sequence, answer.replayed) == (8, 2, True)
    assert [r.headers["Idempotency-Key"] for r in server.requests] == ["key-1", "key-1"]
    assert {r.content for r in server.requests} == {b'{"expected_revision":"7","result":{"paid":1.10}}'}


def test_a_write_without_an_idempotency_key_is_sent_once_and_never_again():
    server, waits = Server((0, httpx.ConnectError("down"))), Waits()
    with pytest.raises(WeaveNetworkError):
        client_for(server, waits).pause_workflow(W, expected_control_revision=1)
    assert len(server.requests) == 1 and waits.waited == []


def test_send_signal_posts_the_command_under_its_key_and_checks_the_workflow():
    receipt = {"signal_id": G, "workflow_id": W, "state": "PENDING"}
    server = Server((200, receipt))
    answer = client_for(server).send_signal(W, idempotency_key="sig-1", command={"payload": RawJSON("1.10")})
    assert answer.data["signal_id"] == G and server.requests[0].content == b'{"payload":1.10}'
    with pytest.raises(WeaveResponseError):
        client_for(Server((200, receipt | {"workflow_id": G}))).send_signal(W, idempotency_key="k", command={})


def test_a_receipt_for_another_workflow_is_an_error():
    receipt = {
        "operation_id": A,
        "operation": "continue",
        "workflow_id": G,
        "revision": "8",
        "control_revision": "3",
        "state": "RUNNING",
        "paused": False,
    }
    with pytest.raises(WeaveResponseError):
        client_for(Server((200, receipt))).continue_workflow(W, idempotency_key="k", command={})


PROPOSAL = {
    "proposal_id": G,
    "workflow_id": W,
    "operation": "retry-step",
    "state": "PENDING",
    "expected_revision": "8",
    "proposed_by": A,
    "reason": "verified",
    "evidence_ref": "ticket:1",
    "created_at": "2026-12-04T08:00:00Z",
    "expires_at": "2026-12-05T08:00:00Z",
    "decided_by": "",
}


def test_a_held_operation_decodes_as_its_proposal_and_the_decisions_post_to_it():
    server = Server(
        (202, PROPOSAL), (200, PROPOSAL | {"state": "REJECTED", "decided_by": S, "decided_at": "2026-12-04T09:00:00Z"})
    )
    client = client_for(server)
    held = client.retry_step(W, idempotency_key="k", command={})
    assert (held.status, held.data.state, held.data.expected_revision, held.data.decided_at) == (
        202,
        "PENDING",
        8,
        None,
    )
    rejected = client.reject_proposal(W, G, idempotency_key="k2", reason="refund instead")
    assert rejected.data.state == "REJECTED"
    assert server.requests[1].url.path == f"/v1/workflows/{W}/proposals/{G}/reject"
    assert json.loads(server.requests[1].content) == {"reason": "refund instead"}


COMPLETION = {"task_id": G, "state": "NEEDS_REVIEW", "revision": "4", "attempt_count": 1, "max_attempts": 3}


@pytest.mark.parametrize("late", [True, False])
def test_complete_task_posts_once_and_decodes_late(late):
    server = Server((200, COMPLETION | {"late": late}))
    answer = client_for(server).complete_task(G, attempt_id=A, outcome="SUCCEEDED", result=RawJSON("1.10"))
    assert (answer.late, answer.revision, answer.state) == (late, 4, "NEEDS_REVIEW")
    assert server.requests[0].url.path == f"/v1/tasks/{G}/complete"
    assert server.requests[0].content == f'{{"attempt_id":"{A}","outcome":"SUCCEEDED","result":1.10}}'.encode()
    assert "Idempotency-Key" not in server.requests[0].headers


def test_heartbeat_task_decodes_late_and_an_answer_without_late_is_a_response_error():
    beat = {"task_id": G, "attempt_id": A, "lease_expires_at": "2026-09-18T08:00:00Z"}
    answer = client_for(Server((200, beat | {"late": True}))).heartbeat_task(G, attempt_id=A, lease_seconds=30)
    assert answer.late is True
    with pytest.raises(WeaveResponseError) as info:
        client_for(Server((200, beat))).heartbeat_task(G, attempt_id=A)
    assert info.value.field == "data.late"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.complete_task("x", attempt_id=A, outcome="SUCCEEDED", result=1), "task_id"),
        (lambda c: c.complete_task(G, attempt_id="x", outcome="SUCCEEDED", result=1), "attempt_id"),
        (lambda c: c.heartbeat_task(G, attempt_id="A" * 32), "attempt_id"),
        (lambda c: c.claim_task("Payments", worker="w"), "queue"),
    ],
)
def test_worker_calls_with_a_bad_id_or_queue_are_refused_before_sending(call, field):
    server = Server((200, {}))
    with pytest.raises(InvalidArgument) as info:
        call(client_for(server))
    assert info.value.field == field and server.requests == []


def test_an_attempt_decodes_its_late_evidence_with_the_result_exact():
    attempt = '{"id":"' + A + '","number":1,"worker":"w1","state":"UNKNOWN","started_at":"2026-09-18T08:00:00Z"'
    late = '{"event_id":"' + S + '","seq":2,"outcome":"FAILED","recorded_at":"2026-09-18T08:00:05Z"'
    late += ',"result":{"n":1.10}}'
    decoded = types.decode(types.Attempt, loads(f'{attempt},"late_evidence":{late}}}'))
    evidence = decoded.late_evidence
    assert (evidence.event_id, evidence.seq, evidence.outcome) == (S, 2, "FAILED")
    assert evidence.result == RawJSON('{"n":1.10}') and evidence.recorded_at.isoformat() == "2026-09-18T08:00:05+00:00"
    assert types.decode(types.Attempt, loads(attempt + "}")).late_evidence is None


def test_iter_items_walks_every_page_from_page_one():
    second = PAGE | {"items": [ITEM | {"id": G, "sequence": 1}]}
    first = PAGE | {"items": [ITEM | {"sequence": 2}], "next_cursor": "next:1"}
    server = Server((200, first), (200, second))
    client = client_for(server)
    items = list(client.iter_items(client.list_workflow_activations, W, "charge", limit=1))
    assert [i.sequence for i in items] == [2, 1]
    assert [dict(r.url.params) for r in server.requests] == [{"limit": "1"}, {"limit": "1", "cursor": "next:1"}]


def test_the_sdk_imports_no_server_code():
    server = "{'core', 'history', 'engine', 'recovery', 'api', 'console', 'weave_site', 'django', 'rest_framework'}"
    code = f"import sys, weave_sdk; print(sorted({{m.split('.')[0] for m in sys.modules}} & {server}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


LINKS = {
    "instance": f"/v1/workflows/{W}",
    "activation": f"/v1/workflows/{W}/steps/settle/activations/{A}",
    "task": f"/v1/workflows/{W}/tasks/{G}",
    "source": f"/v1/tasks/{G}/source",
    "rounds": f"/v1/workflows/{W}/steps/settle/activations/{A}/rounds",
}
SOURCE = {
    "task_id": G,
    "namespace": "acme",
    "instance_id": W,
    "definition": {"name": "order", "version": 2},
    "step_key": "settle",
    "activation": {"id": A, "sequence": 1},
    "poll_round": {"id": S, "round": 3},
    "queue": "payments",
    "links": LINKS,
}


def test_get_task_source_reads_its_path_and_decodes_round_links_and_absent_retry_of():
    server = Server((200, SOURCE))
    source = client_for(server).get_task_source(G)
    assert server.requests[0].url.path == f"/v1/tasks/{G}/source" and server.requests[0].method == "GET"
    assert (source.instance_id, source.definition.version, source.activation.sequence) == (W, 2, 1)
    assert (source.poll_round.id, source.poll_round.round, source.queue) == (S, 3, "payments")
    assert source.retry_of is None and source.links.rounds == LINKS["rounds"]
    task_step = SOURCE | {"poll_round": None, "retry_of": "8" * 32, "links": LINKS | {"rounds": None}}
    plain = {key: value for key, value in task_step.items() if value is not None}
    plain["links"] = {key: value for key, value in task_step["links"].items() if value is not None}
    source = client_for(Server((200, plain))).get_task_source(G)
    assert (source.poll_round, source.retry_of, source.links.rounds) == (None, "8" * 32, None)


def test_get_task_source_refuses_a_bad_id_before_sending_and_an_answer_for_another_task():
    server = Server((200, SOURCE))
    with pytest.raises(InvalidArgument) as refused:
        client_for(server).get_task_source("G" * 32)
    assert refused.value.field == "task_id" and server.requests == []
    with pytest.raises(WeaveResponseError) as mismatch:
        client_for(Server((200, SOURCE | {"task_id": W}))).get_task_source(G)
    assert mismatch.value.code == "RESPONSE_MISMATCH"
    with pytest.raises(WeaveResponseError) as missing:
        client_for(Server((200, {k: v for k, v in SOURCE.items() if k != "links"}))).get_task_source(G)
    assert missing.value.field == "data.links"


def test_a_task_history_decodes_its_late_evidence_list_and_links():
    late = '{"event_id":"' + S + '","seq":2,"outcome":"SUCCEEDED","recorded_at":"2026-09-18T08:00:05Z"'
    late += ',"result":{"n":1.10},"attempt_id":"' + A + '"}'
    task = {
        "id": G,
        "step_key": "settle",
        "activation_id": A,
        "activation_sequence": 1,
        "queue": "payments",
        "handler": "check",
        "priority": 0,
        "state": "NEEDS_REVIEW",
        "revision": "4",
        "attempt_count": 1,
        "max_attempts": 2,
        "input": RawJSON("{}"),
        "execution_settled": False,
        "permit_held": True,
        "created_at": "2026-09-18T08:00:00Z",
        "updated_at": "2026-09-18T08:00:00Z",
        "attempts": [],
        "late_evidence": [loads(late)],
        "links": LINKS,
    }
    decoded = types.decode(types.Task, task)
    (evidence,) = decoded.late_evidence
    assert (evidence.attempt_id, evidence.seq, evidence.result) == (A, 2, RawJSON('{"n":1.10}'))
    assert decoded.links.source == LINKS["source"]


EVENT = {
    "sequence": 4,
    "kind": "task.state",
    "subject": {"type": "task", "id": S, "step_key": "charge"},
    "before": "QUEUED",
    "after": "LEASED",
    "actor": {"kind": "worker", "id": "worker-1"},
    "reconstructed": False,
    "created_at": "2026-09-18T08:00:00Z",
    "links": {"task": f"/v1/workflows/{W}/tasks/{S}"},
}
EVENTS = {"workflow_id": W, "revision": "7", "items": [EVENT]}


def _event_request(server) -> list[tuple[str, str]]:
    return list(server.requests[-1].url.params.multi_items())


def test_list_workflow_events_sends_each_filter_and_repeats_kind():
    server = Server((200, EVENTS))
    client = client_for(server)
    client.list_workflow_events(W)
    assert server.requests[0].url.path == f"/v1/workflows/{W}/events" and _event_request(server) == []
    client.list_workflow_events(
        W, kind=["task.state", "attempt.state"], step_key="$root", after_sequence=0, order="asc", limit=5, cursor="c:1"
    )
    assert _event_request(server) == [
        ("kind", "task.state"),
        ("kind", "attempt.state"),
        ("step_key", "$root"),
        ("after_sequence", "0"),
        ("order", "asc"),
        ("limit", "5"),
        ("cursor", "c:1"),
    ]
    client.list_workflow_events(W, kind="step.state")
    assert _event_request(server) == [("kind", "step.state")]


WORKFLOW_ITEM = {
    "id": W,
    "definition": {"name": "pay", "version": 2},
    "state": "NEEDS_REVIEW",
    "paused": False,
    "business_key": "order-1",
    "revision": "7",
    "created_at": "2026-09-18T08:00:00Z",
    "updated_at": "2026-09-18T08:00:01Z",
    "review_cause": "task_outcome_unknown",
    "review_step_key": "charge",
    "review_since": "2026-09-18T08:00:01Z",
}


def test_list_workflows_sends_every_filter_as_the_server_reads_it():
    import datetime as dt

    server = Server((200, {"items": [WORKFLOW_ITEM]}))
    page = client_for(server).list_workflows(
        state=["NEEDS_REVIEW", "FAILED"],
        review_cause="task_outcome_unknown",
        definition="pay",
        version=2,
        business_key_prefix="order-",
        paused=False,
        stop_kind="FAIL",
        queue="payments",
        created_after=dt.datetime(2026, 9, 18, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        in_review_longer_than=0,
        order="review_since",
        limit=5,
    )
    (request,) = server.requests
    assert request.url.path == "/v1/workflows"
    assert request.url.params.get_list("state") == ["NEEDS_REVIEW", "FAILED"]
    assert dict(request.url.params) | {"state": None} == {
        "state": None,
        "review_cause": "task_outcome_unknown",
        "definition": "pay",
        "version": "2",
        "business_key_prefix": "order-",
        "paused": "false",
        "stop_kind": "FAIL",
        "queue": "payments",
        "created_after": "2026-09-18T08:00:00.000000Z",
        "in_review_longer_than": "0",
        "order": "review_since",
        "limit": "5",
    }
    (item,) = page.items
    assert (item.revision, item.definition.version, item.review_cause, item.stop_kind) == (
        7,
        2,
        "task_outcome_unknown",
        None,
    )
    assert page.next_cursor is None


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"kind": ""}, "kind"),
        ({"kind": []}, "kind"),
        ({"kind": ["task.state", 5]}, "kind"),
        ({"step_key": "-charge"}, "step_key"),
        ({"step_key": "$ROOT"}, "step_key"),
        ({"after_sequence": -1}, "after_sequence"),
        ({"after_sequence": 2**63}, "after_sequence"),
        ({"after_sequence": True}, "after_sequence"),
        ({"after_sequence": "5"}, "after_sequence"),
        ({"order": "ASC"}, "order"),
        ({"limit": 0}, "limit"),
    ],
)
def test_bad_event_filters_are_refused_before_sending(filters, field):
    server = Server((200, EVENTS))
    with pytest.raises(InvalidArgument) as refused:
        client_for(server).list_workflow_events(W, **filters)
    assert refused.value.field == field and server.requests == []


def test_an_event_decodes_subject_actor_and_links_and_leaves_absent_fields_none():
    page = client_for(Server((200, EVENTS))).list_workflow_events(W)
    (event,) = page.items
    assert (page.revision, event.sequence, event.kind, event.before, event.after) == (
        7,
        4,
        "task.state",
        "QUEUED",
        "LEASED",
    )
    assert (event.subject.type, event.subject.id, event.subject.step_key) == ("task", S, "charge")
    assert (event.actor.kind, event.actor.id) == ("worker", "worker-1")
    assert event.links.task == f"/v1/workflows/{W}/tasks/{S}" and event.links.activation is None
    assert event.detail is None and event.operation_id is None and event.audit_id is None
    assert event.created_at.utcoffset().total_seconds() == 0 and page.next_cursor is None


@pytest.mark.parametrize(("order", "sequences"), [(None, [2, 1]), ("asc", [1, 1]), ("desc", [1, 2]), ("desc", [3, 3])])
def test_events_out_of_the_requested_order_are_a_response_error(order, sequences):
    body = EVENTS | {"items": [EVENT | {"sequence": n} for n in sequences]}
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, body))).list_workflow_events(W, order=order)
    assert refused.value.field == "items[].sequence"


@pytest.mark.parametrize("before", [5, {"state": "QUEUED"}, None])
def test_an_event_state_that_is_not_a_string_is_a_response_error(before):
    body = EVENTS | {"items": [EVENT | {"before": before}]}
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, body))).list_workflow_events(W)
    assert refused.value.field == "data.items[0].before"


def test_events_of_another_workflow_are_a_response_error():
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, EVENTS | {"workflow_id": G}))).list_workflow_events(W)
    assert refused.value.code == "RESPONSE_MISMATCH"


def test_iter_workflow_events_follows_the_cursors_with_the_same_filters():
    first = EVENTS | {"items": [EVENT | {"sequence": 9}], "next_cursor": "next:1"}
    second = EVENTS | {"items": [EVENT | {"sequence": 4}]}
    server = Server((200, first), (200, second))
    events = list(client_for(server).iter_workflow_events(W, kind="task.state", order="desc", limit=1))
    assert [e.sequence for e in events] == [9, 4]
    query = [("kind", "task.state"), ("order", "desc"), ("limit", "1")]
    assert [list(r.url.params.multi_items()) for r in server.requests] == [query, [*query, ("cursor", "next:1")]]


def test_an_unknown_event_filter_is_refused_before_sending():
    server = Server((200, EVENTS))
    with pytest.raises(InvalidArgument) as refused:
        client_for(server).list_workflow_events(W, kinds="task.state")
    assert refused.value.field == "kinds" and server.requests == []


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"state": "DONE"}, "state"),
        ({"state": []}, "state"),
        ({"review_cause": [""]}, "review_cause"),
        ({"definition": "Pay"}, "definition"),
        ({"version": 0}, "version"),
        ({"version": True}, "version"),
        ({"business_key": ""}, "business_key"),
        ({"paused": "yes"}, "paused"),
        ({"stop_kind": "cancel"}, "stop_kind"),
        ({"queue": "a b"}, "queue"),
        ({"updated_before": __import__("datetime").datetime(2026, 1, 1)}, "updated_before"),
        ({"in_review_longer_than": -1}, "in_review_longer_than"),
        ({"order": "id"}, "order"),
        ({"limit": 101}, "limit"),
    ],
)
def test_list_workflows_refuses_a_bad_filter_before_sending(filters, field):
    server = Server((200, {"items": []}))
    with pytest.raises(InvalidArgument) as caught:
        client_for(server).list_workflows(**filters)
    assert caught.value.field == field and server.requests == []


def test_iter_workflows_follows_the_cursors_with_the_same_filters():
    first = {"items": [WORKFLOW_ITEM], "next_cursor": "next:1"}
    second = {"items": [WORKFLOW_ITEM | {"id": G}]}
    server = Server((200, first), (200, second))
    items = list(client_for(server).iter_workflows(state="NEEDS_REVIEW", limit=1))
    assert [i.id for i in items] == [W, G]
    assert [dict(r.url.params) for r in server.requests] == [
        {"state": "NEEDS_REVIEW", "limit": "1"},
        {"state": "NEEDS_REVIEW", "limit": "1", "cursor": "next:1"},
    ]


def test_review_summary_decodes_the_counts():
    body = {
        "total": 3,
        "causes": [{"review_cause": "wait_expired", "count": 3}],
        "definitions": [{"definition": {"name": "pay", "version": 1}, "count": 3}],
        "definitions_truncated": False,
    }
    server = Server((200, body))
    summary = client_for(server).review_summary()
    assert server.requests[0].url.path == "/v1/workflows/review-summary"
    assert summary.total == 3 and summary.causes[0].review_cause == "wait_expired"
    assert summary.definitions[0].definition.name == "pay" and summary.definitions_truncated is False
    with pytest.raises(WeaveResponseError):
        client_for(Server((200, body | {"total": "3"}))).review_summary()


def test_get_background_decodes_the_processes_and_the_summary():
    runner = {
        "id": W,
        "kind": "runner",
        "host": "node-1",
        "pid": 4021,
        "started_at": "2026-09-18T08:00:00Z",
        "beat_at": "2026-09-18T08:05:00.250000Z",
        "age_seconds": 3,
        "stale": False,
        "passes": 300,
        "items": 41,
    }
    worker = runner | {"id": S, "kind": "worker", "queue": "payments", "stopped_at": "2026-09-18T08:06:00Z"}
    body = {
        "processes": [runner, worker],
        "summary": {"runners_alive": 1, "workers_alive": 0, "stale": 0},
        "stale_after_seconds": 30,
    }
    server = Server((200, body))
    background = client_for(server).get_background()
    assert server.requests[0].url.path == "/v1/background"
    first, second = background.processes
    assert (first.kind, first.pid, first.queue, first.stopped_at, first.beat_at.microsecond) == (
        "runner",
        4021,
        None,
        None,
        250000,
    )
    assert (second.queue, second.stopped_at.minute) == ("payments", 6)
    assert (background.summary.runners_alive, background.stale_after_seconds) == (1, 30)
    with pytest.raises(WeaveResponseError):
        client_for(Server((200, body | {"summary": {"runners_alive": "1"}}))).get_background()
