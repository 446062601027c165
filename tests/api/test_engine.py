import json

import pytest

from history.models import Scope, Signal, WorkflowInstance
from testkit.driver import task_step
from tests.conftest import bearer

ALL = [Scope.WRITE, Scope.CONTROL, Scope.TASKS_WORK]


@pytest.fixture
def client(engine, issue_token, api):
    token = issue_token(scopes=ALL).token
    api.credentials(**bearer(token))
    return api


def _post(client, path, body, **headers):
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


def _start(client, definition, key="k-1", body=None):
    body = body or {"definition": definition.name, "input": {"amount": 1}}
    return _post(client, "/v1/workflows", body, HTTP_IDEMPOTENCY_KEY=key)


def test_start_answers_201_and_a_replay_is_byte_identical(engine, client):
    definition = engine.define([task_step("a")])
    first = _start(client, definition)
    assert first.status_code == 201, first.content
    data = first.json()["data"]
    assert data["state"] == "RUNNING" and data["revision"] == "1" and data["definition"]["version"] == 1
    again = _start(client, definition)
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert json.dumps(again.json()["data"]) == json.dumps(data)
    assert again.json()["request_id"] != first.json()["request_id"]
    assert WorkflowInstance.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "key", "field"),
    [
        ({"definition": "ghost", "input": {}}, "k", "definition"),
        ({"input": {}}, "k", "definition"),
        ({"definition": "DEF", "input": {}, "extra": 1}, "k", "extra"),
        ({"definition": "DEF"}, "k", "input"),
        ({"definition": "DEF", "input": {}, "deadline_seconds": "10"}, "k", "deadline_seconds"),
        ({"definition": "DEF", "input": {}, "version": 0}, "k", "version"),
        ({"definition": "DEF", "input": {}, "version": 2**64}, "k", "version"),
        ({"definition": "DEF", "input": {}}, None, "Idempotency-Key"),
        ({"definition": "DEF", "input": {}}, "has space", "Idempotency-Key"),
    ],
)
def test_a_bad_start_is_a_field_named_error_and_writes_nothing(engine, client, body, key, field):
    definition = engine.define([task_step("a")])
    body = {k: (definition.name if v == "DEF" else v) for k, v in body.items()}
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    response = _post(client, "/v1/workflows", body, **headers)
    assert response.status_code in (400, 404), response.content
    assert response.json()["error"]["field"] == field
    assert WorkflowInstance.objects.count() == 0


def test_scopes_are_checked_401_before_403(engine, api, issue_token):
    definition = engine.define([task_step("a")])
    assert _start(api, definition).status_code == 401
    api.credentials(**bearer(issue_token(scopes=[Scope.READ, Scope.CONTROL]).token))
    response = _start(api, definition)
    assert response.status_code == 403 and response.json()["error"]["code"] == "PERMISSION_DENIED"


def test_signal_pause_resume_and_cancel_over_http(engine, client):
    signal_step = {"key": "ok", "kind": "SIGNAL", "name": "ok", "payload_version": "1", "deadline_seconds": 60}
    definition = engine.define([signal_step])
    instance_id = _start(client, definition).json()["data"]["id"]
    signal = {"name": "ok", "payload_version": "1", "payload": {"n": 1.50}, "correlation_key": "", "reason": "done"}
    response = _post(client, f"/v1/workflows/{instance_id}/signals", signal, HTTP_IDEMPOTENCY_KEY="s-1")
    assert response.status_code == 201, response.content
    assert response.json()["data"]["signal_id"] == Signal.objects.get().id
    assert (
        _post(client, f"/v1/workflows/{'A' * 32}/signals", signal, HTTP_IDEMPOTENCY_KEY="s-2").json()["error"]["field"]
        == "id"
    )
    missing = _post(client, f"/v1/workflows/{'0' * 32}/signals", signal, HTTP_IDEMPOTENCY_KEY="s-3")
    assert missing.status_code == 404
    paused = _post(client, f"/v1/workflows/{instance_id}/pause", {"expected_control_revision": "1"})
    assert paused.status_code == 200 and paused.json()["data"]["paused"] is True
    stale = _post(client, f"/v1/workflows/{instance_id}/resume", {"expected_control_revision": "1"})
    assert stale.status_code == 409
    number = _post(client, f"/v1/workflows/{instance_id}/resume", {"expected_control_revision": 2})
    assert number.status_code == 400 and number.json()["error"]["field"] == "expected_control_revision"
    cancelled = _post(client, f"/v1/workflows/{instance_id}/cancel", {"expected_control_revision": "2"})
    assert cancelled.json()["data"]["stop_kind"] == "CANCEL"


def test_the_worker_protocol_claims_heartbeats_and_completes(engine, client):
    definition = engine.define([task_step("a")])
    _start(client, definition)
    engine.settle()
    claimed = _post(client, "/v1/queues/payments/claim", {"worker": "py-1", "lease_seconds": 20}).json()["data"]
    assert claimed["claimed"] is True and claimed["task"]["input"] == {"amount": 1}
    task_id, attempt_id = claimed["task"]["id"], claimed["attempt"]["id"]
    assert _post(client, "/v1/queues/payments/claim", {"worker": "py-1"}).json()["data"] == {"claimed": False}
    beat = _post(client, f"/v1/tasks/{task_id}/heartbeat", {"attempt_id": attempt_id, "lease_seconds": 30})
    assert beat.status_code == 200 and beat.json()["data"]["attempt_id"] == attempt_id
    bad = _post(client, f"/v1/tasks/{task_id}/complete", {"attempt_id": attempt_id, "outcome": "MAYBE", "result": 1})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "outcome"
    null_failure = _post(
        client, f"/v1/tasks/{task_id}/complete", {"attempt_id": attempt_id, "outcome": "FAILED", "result": None}
    )
    assert null_failure.json()["error"]["field"] == "result"
    done = _post(
        client, f"/v1/tasks/{task_id}/complete", {"attempt_id": attempt_id, "outcome": "SUCCEEDED", "result": {"ok": 1}}
    )
    assert done.status_code == 200 and done.json()["data"]["state"] == "SUCCEEDED"
    again = _post(
        client, f"/v1/tasks/{task_id}/complete", {"attempt_id": attempt_id, "outcome": "SUCCEEDED", "result": {}}
    )
    assert again.status_code == 400 and again.json()["error"]["field"] == "attempt_id"


def test_a_worker_without_access_to_the_queue_sees_no_queue(engine, api, issue_token):
    api.credentials(**bearer(issue_token(scopes=[Scope.TASKS_WORK], queues=["polls"]).token))
    response = _post(api, "/v1/queues/payments/claim", {"worker": "w"})
    assert response.status_code == 404 and response.json()["error"]["field"] == "queue"
    assert _post(api, "/v1/queues/Bad Name/claim", {"worker": "w"}).status_code in (400, 404)
