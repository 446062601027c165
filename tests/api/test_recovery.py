"""The recovery API: routes, Idempotency-Key, status mapping, byte-identical replays."""

import json

import pytest

from core import exactjson
from history.models import Queue, Scope
from testkit import requests as rq
from testkit import states
from tests.conftest import bearer
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


def _post(api, token, state, operation, body, key="key-1", raw=None):
    headers = bearer(token) | ({"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {})
    payload = raw if raw is not None else exactjson.dumps(body)
    return api.post(
        f"/v1/workflows/{state.instance.id}/recovery/{operation}",
        data=payload,
        content_type="application/json",
        **headers,
    )


def _data_text(response) -> str:
    """The exact text of the envelope's ``data`` member."""
    body = response.content.decode()
    prefix = '{"request_id":"' + json.loads(body)["request_id"] + '","data":'
    assert body.startswith(prefix) and body.endswith("}")
    return body[len(prefix) : -1]


def _error(response) -> dict:
    return json.loads(response.content)["error"]


def test_a_committed_operation_answers_its_receipt_in_the_envelope(api, tenancy, recover_token):
    state = states.task_unknown_state(tenancy)
    revision = state.instance.revision
    response = _post(api, recover_token.token, state, "review-task", rq.review(state))
    assert response.status_code == 200 and "Idempotent-Replayed" not in response
    data = json.loads(response.content)["data"]
    audit = state.operations().get()
    assert data["operation_id"] == audit.operation_id and data["revision"] == str(revision + 1)
    assert audit.request_id == response["X-Request-Id"]


def test_a_replay_answers_the_same_status_and_byte_identical_data_with_a_new_request_id(api, tenancy, recover_token):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    first = _post(api, recover_token.token, state, "review-task", command)
    again = _post(api, recover_token.token, state, "review-task", command)
    assert again.status_code == first.status_code == 200
    assert _data_text(again) == _data_text(first)
    assert json.loads(again.content)["request_id"] != json.loads(first.content)["request_id"]
    assert again["Idempotent-Replayed"] == "true"


def test_no_token_is_401_before_a_missing_scope_is_403(api, tenancy, issue_token):
    state = states.task_unknown_state(tenancy)
    url = f"/v1/workflows/{state.instance.id}/recovery/continue"
    assert api.post(url, data="{}", content_type="application/json").status_code == 401
    reader = issue_token(scopes=[Scope.READ, Scope.CONTROL])
    response = _post(api, reader.token, state, "continue", {}, key=None)
    assert response.status_code == 403 and _error(response)["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("key", [None, "", "x" * 129, "clé"])
def test_a_missing_or_invalid_idempotency_key_is_400_naming_the_header(api, tenancy, recover_token, key):
    state = states.task_unknown_state(tenancy)
    before = history_digest()
    response = _post(api, recover_token.token, state, "review-task", rq.review(state), key=key)
    assert response.status_code == 400
    assert _error(response) | {"message": ""} == {"code": "INVALID_ARGUMENT", "field": "Idempotency-Key", "message": ""}
    assert history_digest() == before


@pytest.mark.parametrize("raw", ["{not json", '{"a":1,"a":2}', "7", "[]"])
def test_a_body_that_is_not_a_json_object_is_400(api, tenancy, recover_token, raw):
    state = states.task_unknown_state(tenancy)
    response = _post(api, recover_token.token, state, "continue", None, raw=raw)
    assert response.status_code == 400 and _error(response)["code"] == "INVALID_ARGUMENT"


def test_a_revision_sent_as_a_json_number_is_400_naming_the_field(api, tenancy, recover_token):
    state = states.task_unknown_state(tenancy)
    raw = exactjson.dumps(rq.continue_(state)).replace(
        f'"expected_revision":"{state.instance.revision}"', f'"expected_revision":{state.instance.revision}'
    )
    response = _post(api, recover_token.token, state, "continue", None, raw=raw)
    assert response.status_code == 400 and _error(response)["field"] == "expected_revision"


def _stale(state):
    return rq.continue_(state, expected_revision="1")


def _quota_full(state):
    Queue.objects.filter(pk=state.queue.pk).update(max_active_tasks=0)
    return rq.retry(state)


@pytest.mark.parametrize(
    ("operation", "build", "status", "code"),
    [
        ("continue", _stale, 409, "ABORTED"),
        ("continue", rq.continue_, 400, "FAILED_PRECONDITION"),
        ("retry-step", lambda s: rq.retry(s, step_key="nope"), 404, "NOT_FOUND"),
        ("retry-step", _quota_full, 429, "RESOURCE_EXHAUSTED"),
        ("resolve-step", lambda s: rq.resolve(s, reason=""), 400, "INVALID_ARGUMENT"),
    ],
)
def test_errors_map_to_their_status(api, tenancy, recover_token, operation, build, status, code):
    state = states.task_failed_state(tenancy)
    response = _post(api, recover_token.token, state, operation, build(state))
    assert (response.status_code, _error(response)["code"]) == (status, code)


def test_broken_ownership_is_503(api, tenancy, recover_token):
    state = states.task_failed_state(tenancy)
    state.activation.task_id = None
    state.activation.save()
    response = _post(api, recover_token.token, state, "retry-step", rq.retry(state))
    assert (response.status_code, _error(response)["code"]) == (503, "UNAVAILABLE")


def test_the_same_key_for_another_command_is_409_already_exists(api, tenancy, recover_token):
    state = states.task_failed_state(tenancy)
    assert _post(api, recover_token.token, state, "retry-step", rq.retry(state)).status_code == 200
    response = _post(api, recover_token.token, state, "continue", rq.continue_(state))
    assert (response.status_code, _error(response)["code"]) == (409, "ALREADY_EXISTS")


@pytest.mark.parametrize(
    ("operation", "build", "make"),
    [
        ("review-task", rq.review, states.task_unknown_state),
        ("resolve-step", rq.resolve, states.task_reviewed_state),
        ("continue-poll", rq.continue_poll, states.poll_pending_reviewed_state),
        ("rearm-wait", rq.rearm, states.timer_late_state),
        ("retry-step", rq.retry, states.task_failed_state),
        ("continue", rq.continue_, states.task_resolved_state),
    ],
)
def test_each_route_runs_its_operation(api, tenancy, recover_token, operation, build, make):
    state = make(tenancy)
    response = _post(api, recover_token.token, state, operation, build(state))
    assert response.status_code == 200
    assert json.loads(response.content)["data"]["operation"] == "workflow." + operation.replace("-", "_")


def test_only_post_is_allowed(api, tenancy, recover_token):
    state = states.task_unknown_state(tenancy)
    response = api.get(f"/v1/workflows/{state.instance.id}/recovery/continue", **bearer(recover_token.token))
    assert response.status_code == 405
