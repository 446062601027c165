"""The OpenAPI description is served offline and describes the real responses and errors."""

import copy
import datetime as dt
import json
import re

import httpx
import jsonschema
import jsonschema_rs
import pytest
from django.db.migrations.recorder import MigrationRecorder
from hypothesis import given, settings
from hypothesis import strategies as st

from api import instance_filters, schema
from api.schema import REVISION_SCHEMA, decimal_range_pattern
from core import exactjson, limits
from core import readiness as readiness_module
from core.ids import MAX_UINT64, is_id, parse_revision
from engine.worker import task_complete
from history.background import background_process_beat, background_process_start
from history.models import (
    ActivationState,
    AttemptState,
    BackgroundProcess,
    Disposition,
    ProcessKind,
    ReviewCause,
    Scope,
    SignalState,
    Step,
    Wait,
    WorkflowInstance,
)
from recovery.operations import OPERATIONS as RECOVERY_OPERATIONS
from testkit import requests as rq
from testkit import states
from testkit.driver import Engine
from tests.conftest import ENDPOINTS, bearer
from tests.factories import AttemptFactory, SignalFactory, activate, step_of

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)
OPERATIONS = {
    "instance": "get_workflow",
    "activations": "list_workflow_activations",
    "activation": "get_workflow_activation",
    "rounds": "list_workflow_poll_rounds",
    "signals": "list_workflow_signals",
    "signal": "get_workflow_signal",
    "signal_operations": "list_workflow_signal_operations",
    "signal_operation": "get_workflow_signal_operation",
    "task": "get_workflow_task",
    "operations": "list_workflow_operations",
    "source": "get_task_source",
    "events": "list_workflow_events",
}
# Query parameters of the lists besides limit and cursor.
FILTERS = {"list_workflow_events": {"kind", "step_key", "after_sequence", "order"}}


@pytest.fixture
def openapi(api, db):
    response = api.get("/v1/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def _operation(openapi, operation_id):
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and operation.get("operationId") == operation_id:
                return path, method, operation
    raise AssertionError(f"{operation_id} is not described")


def _strict(schema, components):
    """The component as plain JSON Schema: refs resolved, nullable spelled out, no undocumented keys."""
    if isinstance(schema, list):
        return [_strict(s, components) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _strict(components[schema["$ref"].rsplit("/", 1)[1]], components)
    result = {key: _strict(value, components) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable"):
        result = {"anyOf": [result, {"type": "null"}]}
    elif "properties" in result:
        result.setdefault("additionalProperties", False)
    return result


def test_the_schema_describes_every_read_endpoint_with_its_envelope_and_errors(openapi):
    assert openapi["openapi"].startswith("3.")
    assert openapi["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "a token issued by manage.py weave_bootstrap",
    }
    components = openapi["components"]["schemas"]
    for operation_id in OPERATIONS.values():
        path, method, operation = _operation(openapi, operation_id)
        assert method == "get"
        assert {"bearerAuth": []} in operation["security"]
        assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "503"}
        ok = _strict(operation["responses"]["200"]["content"]["application/json"]["schema"], components)
        assert set(ok["required"]) == {"request_id", "data"}
        error = _strict(operation["responses"]["404"]["content"]["application/json"]["schema"], components)
        assert set(error["properties"]) == {"request_id", "error"}
        assert error["properties"]["error"]["required"] == ["code", "message"]
        names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert names == (
            {"limit", "cursor"} | FILTERS.get(operation_id, set()) if operation_id.startswith("list_") else set()
        )


def test_swagger_ui_is_served_offline_from_the_sidecar(api, db):
    response = api.get("/v1/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in page
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page
    # The start script is its own URL (no inline script under the Content-Security-Policy).
    assert '<script src="/v1/docs/?script="></script>' in page
    assert "/v1/openapi.json" in api.get("/v1/docs/?script=").content.decode()


def _fill_optional_fields(history_rows):
    """Give every optional field of the read bodies a value, so the strict check sees them all."""
    workflow = history_rows.workflow
    WorkflowInstance.objects.filter(id=workflow.id).update(
        stop_kind="CANCEL",
        deadline_at=T0,
        review_reason="lease expired",
        review_cause="task_outcome_unknown",
        review_step_key="charge",
        review_since=T0,
        completed_at=T0,
        output='{"charge":{"paid":true}}',
    )
    Step.objects.filter(id=history_rows.charge.step_id).update(resolution={"conclusion": "FAILED"})
    activate(step_of(workflow, "approve"), state=ActivationState.SUCCEEDED, completed_at=T0, output="null")
    AttemptFactory(task=history_rows.charge.task, state=AttemptState.SUCCEEDED, finished_at=T0, lease_expires_at=T0)
    history_rows.signal.evidence_ref = "proof:1"
    history_rows.signal.disposition = Disposition.APPLIED
    history_rows.signal.state = SignalState.CONSUMED
    history_rows.signal.consumed_wait_id = step_of(workflow, "approve").current_activation.wait_id
    history_rows.signal.save()
    Wait.objects.filter(id=history_rows.signal.consumed_wait_id).update(winner_signal=history_rows.signal, fire_at=T0)
    SignalFactory(workflow=workflow, payload_version="", target_activation_sequence=0)


def test_every_real_response_matches_its_documented_schema_exactly(history_rows, api, openapi, token_for):
    _fill_optional_fields(history_rows)
    components = openapi["components"]["schemas"]
    paths = dict(history_rows.paths)
    approve = step_of(history_rows.workflow, "approve").current_activation_id
    paths["wait activation"] = (
        f"/v1/workflows/{history_rows.workflow.id}/steps/approve/activations/{approve}",
    ) + paths["activation"][1:]
    paths["poll activation"] = (paths["rounds"][0].rsplit("/", 1)[0],) + paths["activation"][1:]
    operation_of = OPERATIONS | {
        "wait activation": "get_workflow_activation",
        "poll activation": "get_workflow_activation",
    }
    for name in [*ENDPOINTS, "wait activation", "poll activation"]:
        path, scope, _ = paths[name]
        _, _, operation = _operation(openapi, operation_of[name])
        response = api.get(path, {"limit": "1"} if name in ("signals",) else None, **bearer(token_for(scope)))
        assert response.status_code == 200, (name, response.content)
        schema = _strict(
            copy.deepcopy(operation["responses"]["200"]["content"]["application/json"]["schema"]), components
        )
        jsonschema.validate(json.loads(response.content), schema)
        refused = api.get(path.replace(history_rows.workflow.id, "e" * 32), **bearer(token_for(scope)))
        error_schema = _strict(operation["responses"]["404"]["content"]["application/json"]["schema"], components)
        jsonschema.validate(json.loads(refused.content), error_schema)


def test_the_api_index_and_its_refusal_match_their_documented_schemas_exactly(api, openapi):
    components = openapi["components"]["schemas"]
    path, _, operation = _operation(openapi, "get_api_index")
    assert "security" not in operation
    for query, status in ((None, 200), ({"bogus": "1"}, 400)):
        response = api.get(path, query)
        assert response.status_code == status
        described = operation["responses"][str(status)]["content"]["application/json"]["schema"]
        jsonschema.validate(json.loads(response.content), _strict(copy.deepcopy(described), components))


def _late_evidence_of(tenancy) -> states.State:
    """An engine-built UNKNOWN attempt whose worker then completes it: the task carries late evidence."""
    state = states.task_unknown_state(tenancy)
    attempt = state.task.attempts.get()
    command = {"attempt_id": attempt.id, "outcome": "FAILED", "result": {"error": "declined"}}
    assert task_complete(identity=Engine(*tenancy).identity, task_id=state.task.id, command=command).late
    return state


def test_the_task_source_and_the_execution_history_match_their_documented_schemas_exactly(
    tenancy, api, openapi, issue_token
):
    components = openapi["components"]["schemas"]
    retried = states.task_retried_state(tenancy)
    poll = states.poll_round_failed_state(tenancy)
    late = _late_evidence_of(tenancy)
    reads = [
        ("get_task_source", f"/v1/tasks/{retried.task.id}/source", "retry_of"),
        ("get_task_source", f"/v1/tasks/{poll.task.id}/source", "poll_round"),
        ("get_workflow_task", f"/v1/workflows/{poll.instance.id}/tasks/{poll.task.id}", "links"),
        ("get_workflow_task", f"/v1/workflows/{late.instance.id}/tasks/{late.task.id}", "late_evidence"),
    ]
    for scope in (Scope.READ, Scope.TASKS_WORK):
        token = issue_token(scopes=[scope]).token
        for operation_id, path, shown in reads:
            if operation_id == "get_workflow_task" and scope == Scope.TASKS_WORK:
                continue
            _, _, operation = _operation(openapi, operation_id)
            response = api.get(path, **bearer(token))
            assert response.status_code == 200, (path, response.content)
            described = operation["responses"]["200"]["content"]["application/json"]["schema"]
            jsonschema.validate(json.loads(response.content), _strict(copy.deepcopy(described), components))
            data = response.json()["data"]
            assert data.get(shown) or data["task"][shown], shown
        refused = api.get(f"/v1/tasks/{'e' * 32}/source", **bearer(token))
        _, _, operation = _operation(openapi, "get_task_source")
        error = operation["responses"]["404"]["content"]["application/json"]["schema"]
        jsonschema.validate(json.loads(refused.content), _strict(error, components))


@pytest.mark.django_db(transaction=True)
def test_the_swagger_ui_assets_come_from_this_server(live_server):
    page = httpx.get(f"{live_server.url}/v1/docs/").text
    assets = re.findall(r'(?:src|href)="(/static/drf_spectacular_sidecar/[^"]+)"', page)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
    for asset in assets:
        assert httpx.get(f"{live_server.url}{asset}").status_code == 200, asset


# ---- the POST endpoints -----------------------------------------------------------------------

# Every POST can meet a body over the size limit (413), or a chunked one a server cannot end (411).
ENGINE_POSTS = {
    "start_workflow": (201, {400, 401, 403, 404, 409, 411, 413, 503}),
    "signal_workflow": (201, {400, 401, 403, 404, 409, 411, 413, 503}),
    "pause_workflow": (200, {400, 401, 403, 404, 409, 411, 413, 503}),
    "resume_workflow": (200, {400, 401, 403, 404, 409, 411, 413, 503}),
    "cancel_workflow": (200, {400, 401, 403, 404, 409, 411, 413, 503}),
    "claim_queue_task": (200, {400, 401, 403, 404, 411, 413, 503}),
    "heartbeat_task": (200, {400, 401, 403, 404, 411, 413, 503}),
    "complete_task": (200, {400, 401, 403, 404, 411, 413, 503}),
}
RECOVERY_ERRORS = {400, 401, 403, 404, 409, 411, 413, 503}
RECOVERY_POSTS = {
    f"recovery_{name.replace('-', '_')}": (200, RECOVERY_ERRORS | ({429} if name == "retry-step" else set()))
    for name in RECOVERY_OPERATIONS
}
# The decisions on a proposal; only an approval runs the operation, so only it can meet a full quota.
DECISION_POSTS = {
    "approve_recovery_proposal": (200, RECOVERY_ERRORS | {429}),
    "reject_recovery_proposal": (200, RECOVERY_ERRORS),
}
IDEMPOTENT = {"start_workflow", "signal_workflow", *RECOVERY_POSTS, *DECISION_POSTS}


def test_every_post_operation_documents_its_command_answer_and_only_the_errors_it_can_answer(openapi):
    components = openapi["components"]["schemas"]
    for operation_id, (success, errors) in (ENGINE_POSTS | RECOVERY_POSTS | DECISION_POSTS).items():
        path, method, operation = _operation(openapi, operation_id)
        assert method == "post" and {"bearerAuth": []} in operation["security"]
        # A recovery command an approval policy holds back answers 202 with the proposal.
        proposed = {202} if operation_id in RECOVERY_POSTS else set()
        assert set(operation["responses"]) == {str(status) for status in {success, *errors, *proposed}}, operation_id
        ok = _strict(operation["responses"][str(success)]["content"]["application/json"]["schema"], components)
        assert set(ok["required"]) == {"request_id", "data"}
        for status in errors:
            error = operation["responses"][str(status)]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorEnvelope"}, (operation_id, status)
        body = operation["requestBody"]
        described = _strict(body["content"]["application/json"]["schema"], components)
        # A command with dependent fields is one closed object per variant.
        assert body["required"] and all(v["additionalProperties"] is False for v in described.get("oneOf", [described]))
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        for name in re.findall(r"{(\w+)}", path):
            assert parameters[name]["in"] == "path" and parameters[name]["schema"]["pattern"].startswith("^")
        key = parameters.get("Idempotency-Key")
        assert (key is not None and key["in"] == "header" and key["required"]) == (operation_id in IDEMPOTENT)
    # The receipt's data: members every operation answers, and those only some operations touch.
    always = {"operation_id", "operation", "workflow_id", "revision", "control_revision", "state", "paused"}
    sometimes = {"execution_operation_id", "step_key", "activation_id", "activation_sequence", "task_id", "proposal_id"}
    receipt = components["RecoveryReceipt"]
    assert set(receipt["required"]) == always and set(receipt["properties"]) == always | sometimes


class Described:
    """Posts real commands and checks each command and answer against the served description, exactly."""

    def __init__(self, api, openapi, token):
        self.api, self.openapi, self.token = api, openapi, token
        self.components = openapi["components"]["schemas"]

    def post(self, operation_id, path, body, status, *, key=None, token=None):
        """Post ``body`` expecting ``status``; ``token`` replaces the default one, "" sends none."""
        _, _, operation = _operation(self.openapi, operation_id)
        text = exactjson.dumps(body)
        if status < 300:
            # A command the server accepts is one the description accepts.
            jsonschema.validate(json.loads(text), self._schema(operation["requestBody"]))
        headers = bearer(self.token if token is None else token) if token != "" else {}
        if key is not None:
            headers["HTTP_IDEMPOTENCY_KEY"] = key
        response = self.api.post(path, data=text, content_type="application/json", **headers)
        assert response.status_code == status, (operation_id, response.content)
        described = operation["responses"][str(status)]
        jsonschema.validate(json.loads(response.content), self._schema(described))
        if "Idempotent-Replayed" in response:
            assert "Idempotent-Replayed" in described["headers"], operation_id
        return json.loads(response.content)

    def _schema(self, described):
        return _strict(copy.deepcopy(described["content"]["application/json"]["schema"]), self.components)


POLL = {
    "key": "settle",
    "kind": "POLL",
    "handler": "demo.poll_pending",
    "queue": "payments",
    "max_rounds": 3,
    "attempts_per_round": 2,
    "interval_seconds": 60,
    "poll_deadline_seconds": 3600,
    "mapping": {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING"}},
}
SIGNAL = {"key": "approve", "kind": "SIGNAL", "name": "approved", "payload_version": "1", "deadline_seconds": 600}


def test_every_real_engine_answer_and_error_matches_its_documented_schema_exactly(tenancy, issue_token, api, openapi):
    engine = Engine(*tenancy)
    definition = engine.define([POLL, SIGNAL], deadline_seconds=86400)
    posts = Described(api, openapi, issue_token(scopes=[Scope.WRITE, Scope.CONTROL, Scope.TASKS_WORK]).token)
    start = {
        "definition": definition.name,
        "version": definition.version,
        "input": {"amount": 1.10},
        "business_key": "order-1",
        "deadline_seconds": 3600,
    }
    started = posts.post("start_workflow", "/v1/workflows", start, 201, key="start-1")["data"]
    posts.post("start_workflow", "/v1/workflows", start, 201, key="start-1")
    posts.post("start_workflow", "/v1/workflows", start | {"business_key": "order-2"}, 409, key="start-1")
    posts.post("start_workflow", "/v1/workflows", start, 400)
    posts.post("start_workflow", "/v1/workflows", {"definition": "ghost", "input": {}}, 404, key="start-2")
    posts.post("start_workflow", "/v1/workflows", start, 401, key="start-3", token="")
    posts.post("start_workflow", "/v1/workflows", start, 403, key="start-3", token=issue_token().token)

    w, ghost = f"/v1/workflows/{started['id']}", f"/v1/workflows/{'e' * 32}"
    signal = {
        "name": "approved",
        "payload_version": "1",
        "payload": {"ok": True},
        "correlation_key": "",
        "target_step_key": "approve",
        "target_activation_sequence": 1,
        "reason": "approved by the desk",
        "evidence_ref": "ticket:OPS-1",
    }
    posts.post("signal_workflow", f"{w}/signals", signal, 201, key="signal-1")
    posts.post("signal_workflow", f"{w}/signals", signal | {"payload": {}}, 409, key="signal-1")
    posts.post("signal_workflow", f"{ghost}/signals", signal, 404, key="signal-2")
    posts.post("signal_workflow", f"{w}/signals", signal | {"target_step_key": "settle"}, 400, key="signal-3")

    engine.settle()
    claim = posts.post("claim_queue_task", "/v1/queues/payments/claim", {"worker": "w-1", "lease_seconds": 30}, 200)
    assert {"round", "deadline_at"} <= set(claim["data"]["task"])
    posts.post("claim_queue_task", "/v1/queues/payments/claim", {"worker": "w-1"}, 200)
    posts.post("claim_queue_task", "/v1/queues/ghost/claim", {"worker": "w-1"}, 404)
    posts.post("claim_queue_task", "/v1/queues/payments/claim", {"worker": ""}, 400)
    task = f"/v1/tasks/{claim['data']['task']['id']}"
    attempt = {"attempt_id": claim["data"]["attempt"]["id"]}
    posts.post("heartbeat_task", f"{task}/heartbeat", attempt | {"lease_seconds": 60}, 200)
    posts.post("heartbeat_task", f"/v1/tasks/{'e' * 32}/heartbeat", attempt, 404)
    done = attempt | {"outcome": "SUCCEEDED", "result": {"status": "done"}}
    posts.post("complete_task", f"{task}/complete", done, 200)
    posts.post("complete_task", f"{task}/complete", done, 400)
    posts.post("heartbeat_task", f"{task}/heartbeat", attempt, 400)

    control = WorkflowInstance.objects.get(pk=started["id"]).control_revision
    paused = posts.post("pause_workflow", f"{w}/pause", {"expected_control_revision": str(control)}, 200)["data"]
    revision = {"expected_control_revision": paused["control_revision"]}
    posts.post("pause_workflow", f"{w}/pause", revision, 400)
    posts.post("resume_workflow", f"{w}/resume", {"expected_control_revision": str(control)}, 409)
    resumed = posts.post("resume_workflow", f"{w}/resume", revision | {"reason": "desk open"}, 200)["data"]
    cancel = {"expected_control_revision": resumed["control_revision"], "reason": "order withdrawn"}
    posts.post("cancel_workflow", f"{ghost}/cancel", cancel, 404)
    assert posts.post("cancel_workflow", f"{w}/cancel", cancel, 200)["data"]["stop_kind"] == "CANCEL"


@pytest.mark.parametrize("case", rq.cases(), ids=lambda case: case[0])
def test_every_real_recovery_receipt_and_error_matches_its_documented_schema_exactly(
    case, tenancy, issue_token, api, openapi
):
    _, service, build, make = case
    operation = next(name for name, op in RECOVERY_OPERATIONS.items() if op.service is service)
    operation_id = f"recovery_{operation.replace('-', '_')}"
    posts = Described(api, openapi, issue_token(scopes=[Scope.RECOVER]).token)
    state = make(tenancy)
    command = build(state)
    path = f"/v1/workflows/{state.instance.id}/recovery/{operation}"
    receipt = posts.post(operation_id, path, command, 200, key="key-1")["data"]
    assert receipt["workflow_id"] == state.instance.id
    posts.post(operation_id, path, command, 200, key="key-1")
    posts.post(operation_id, path, command | {"reason": "another"}, 409, key="key-1")
    posts.post(operation_id, path, command, 400)
    posts.post(operation_id, f"/v1/workflows/{'e' * 32}/recovery/{operation}", command, 404, key="key-2")
    posts.post(operation_id, path, command, 403, key="key-3", token=issue_token(scopes=[Scope.CONTROL]).token)


def test_a_full_quota_answers_the_documented_resource_exhausted(tenancy, issue_token, api, openapi):
    state = states.task_failed_state(tenancy)
    state.queue.max_active_tasks = state.queue.active_tasks
    state.queue.save()
    posts = Described(api, openapi, issue_token(scopes=[Scope.RECOVER]).token)
    path = f"/v1/workflows/{state.instance.id}/recovery/retry-step"
    error = posts.post("recovery_retry_step", path, rq.retry(state), 429, key="key-1")["error"]
    assert error["code"] == "RESOURCE_EXHAUSTED"


# ---- the description is as strict as the server ----------------------------------------------------------


@pytest.mark.parametrize("maximum", [1, 9, 10, 99, 100, 255, 2**32 - 1, MAX_UINT64, 10**25])
def test_the_decimal_range_pattern_matches_exactly_1_to_its_maximum(maximum):
    pattern = re.compile(decimal_range_pattern(maximum))
    digits = str(maximum)
    samples = {1, 9, 10, maximum - 1, maximum, maximum + 1, maximum * 10, int(digits[0] + "0" * (len(digits) - 1))}
    # Every number that shares a prefix with the maximum, one digit above and below it at each position.
    for i in range(len(digits)):
        for delta in (-1, 1):
            samples.add(maximum + delta * 10 ** (len(digits) - 1 - i))
    for number in sorted(n for n in samples if n >= 1):
        assert (pattern.fullmatch(str(number)) is not None) == (number <= maximum), number
    for text in ("0", "00", "01", "-1", "+1", " 1", "1 ", "", "1.0", "1e3", "٣"):
        assert pattern.fullmatch(text) is None, text


@given(st.integers(min_value=-5, max_value=MAX_UINT64 * 3))
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
def test_a_revision_is_valid_in_the_description_exactly_when_the_server_parses_it(number):
    revision = REVISION_SCHEMA
    text = str(number)
    described = re.fullmatch(revision["pattern"], text) is not None and len(text) <= revision["maxLength"]
    assert described == (parse_revision(text) is not None)


@given(st.text(st.characters(codec="utf-8"), max_size=12))
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_the_text_patterns_are_the_limits_rules(text):
    """A reason is valid text holding a non-whitespace character; blank text fields follow TEXT_RE alone.

    Over Unicode text, that is: a lone surrogate is not text a schema can hold (and the server refuses it)."""
    reason = schema.text_schema(max_length=limits.MAX_REASON)
    assert (re.fullmatch(reason["pattern"], text) is not None) == (
        limits.TEXT_RE.fullmatch(text) is not None and text.strip() != ""
    )
    blank = schema.text_schema(max_length=256, blank=True)
    assert (re.fullmatch(blank["pattern"], text) is not None) == (limits.TEXT_RE.fullmatch(text) is not None)
    token = schema.token_schema(max_length=limits.MAX_EVIDENCE_REF)
    assert (re.fullmatch(token["pattern"], text) is not None) == (limits.TOKEN_RE.fullmatch(text) is not None)


_DIGITS = st.text("0123456789", min_size=1, max_size=3)
_TIMES = st.one_of(
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59)).map(
        lambda moment: moment.isoformat()
    ),
    st.builds(
        "{}-{}-{}T{}:{}:{}{}{}".format,
        st.text("0123456789", min_size=4, max_size=4),
        *[_DIGITS] * 5,
        st.sampled_from(["", ".5", ".123456", ".1234567"]),
        st.builds("{}{}:{}".format, st.sampled_from("+-"), _DIGITS, _DIGITS) | st.sampled_from(["Z", "z", ""]),
    ),
)


@given(_TIMES | st.builds("{}Z".format, _TIMES))
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_a_time_filter_is_valid_in_the_description_exactly_when_the_server_parses_it(text):
    """Month lengths, leap years, hours, offsets and fraction digits: the pattern is the server's parser."""
    pattern = schema.QUERY_TIME_SCHEMA["pattern"]
    assert (re.fullmatch(pattern, text) is not None) == (instance_filters.TimeField().parse(text) is not None)


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("2024-02-29T00:00:00Z", True),
        ("2000-02-29T00:00:00+01:00", True),
        ("2100-02-29T00:00:00Z", False),
        ("2026-04-31T00:00:00Z", False),
        ("0000-01-01T00:00:00Z", False),
        ("2026-12-31T23:59:60Z", False),
        ("2026-01-01T24:00:00Z", False),
        ("2026-01-01T00:00:00.1234567Z", False),
        ("2026-01-01T00:00:00+24:00", False),
    ],
)
def test_the_time_filter_pattern_knows_the_calendar(text, valid):
    assert (re.fullmatch(schema.QUERY_TIME_SCHEMA["pattern"], text) is not None) is valid
    assert (instance_filters.TimeField().parse(text) is not None) is valid


def test_an_assignee_is_valid_in_the_description_exactly_when_it_is_an_actor_id_or_empty(openapi):
    """The shape the server checks before it looks for the operator (no operator: FAILED_PRECONDITION)."""
    described = _strict(_field(openapi, "AssignCommand", "assignee"), openapi["components"]["schemas"])
    for text in ("", "f" * 32, "0123456789abcdef" * 2, "F" * 32, "f" * 31, "f" * 33, "g" * 32, " " + "f" * 31, "bob"):
        assert jsonschema.Draft7Validator(described).is_valid(text) == (text == "" or is_id(text)), text


@pytest.mark.parametrize("pattern", [schema.TEXT_PATTERN, schema.TOKEN_PATTERN, schema.NONBLANK_TEXT_PATTERN])
def test_every_text_pattern_compiles_in_a_rust_regex_engine(pattern):
    """Clients validate with other engines than Python's: jsonschema_rs (Rust) must compile the pattern."""
    validator = jsonschema_rs.Draft202012Validator({"type": "string", "pattern": pattern})
    assert validator.is_valid("ticket:OPS-1") and not validator.is_valid("a\u202eb")


def test_the_time_filter_pattern_compiles_in_a_rust_regex_engine():
    validator = jsonschema_rs.Draft202012Validator({"type": "string", "pattern": schema.QUERY_TIME_SCHEMA["pattern"]})
    assert validator.is_valid("2024-02-29T08:00:00Z") and not validator.is_valid("2026-02-29T08:00:00Z")


def _field(openapi, component: str, name: str) -> dict:
    """The property as described (nullable kept as the flag it is)."""
    return openapi["components"]["schemas"][component]["properties"][name]


def _parameter(openapi, operation_id: str, name: str) -> dict:
    _, _, operation = _operation(openapi, operation_id)
    return next(p for p in operation["parameters"] if p["name"] == name)["schema"]


REASON = {"minLength": 1, "maxLength": limits.MAX_REASON, "pattern": schema.NONBLANK_TEXT_PATTERN}
EVIDENCE_REF = {"minLength": 1, "maxLength": limits.MAX_EVIDENCE_REF, "pattern": schema.TOKEN_PATTERN}
REVISION = {"minLength": 1, "maxLength": 20, "pattern": f"^{decimal_range_pattern(MAX_UINT64)}$"}
ID = {"minLength": 32, "maxLength": 32, "pattern": "^[0-9a-f]{32}$"}
U32_FROM_1 = {"type": "integer", "minimum": 1, "maximum": 2**32 - 1}
CONSTRAINTS = [
    ("StartCommand", "version", U32_FROM_1),
    ("StartCommand", "deadline_seconds", {"minimum": 1, "maximum": 366 * 24 * 3600}),
    ("StartCommand", "business_key", {"maxLength": 256, "pattern": schema.TEXT_PATTERN}),
    ("StartCommand", "definition", {"pattern": "^[a-z0-9][a-z0-9_.\\-]{0,63}$"}),
    ("SignalCommand", "name", {"minLength": 1, "maxLength": 128, "pattern": schema.NONBLANK_TEXT_PATTERN}),
    ("SignalCommand", "payload_version", {"minLength": 1, "maxLength": 64}),
    ("SignalCommand", "correlation_key", {"maxLength": 256, "pattern": schema.TEXT_PATTERN}),
    ("SignalCommand", "target_step_key", {"pattern": "^[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}$"}),
    ("SignalCommand", "target_activation_sequence", U32_FROM_1),
    ("SignalCommand", "reason", REASON),
    ("SignalCommand", "evidence_ref", EVIDENCE_REF),
    ("ControlCommand", "reason", REASON),
    ("ControlCommand", "expected_control_revision", REVISION),
    ("ClaimCommand", "worker", {"minLength": 1, "maxLength": 128}),
    ("ClaimCommand", "lease_seconds", {"minimum": 1, "maximum": 3600}),
    ("HeartbeatCommand", "attempt_id", ID),
    ("HeartbeatCommand", "lease_seconds", {"minimum": 1, "maximum": 3600}),
    ("CompleteFailed", "attempt_id", ID),
    *[
        (command, name, rule)
        for command in (
            "ReviewTaskCommand",
            "ResolveStepCommandFailed",
            "ContinuePollCommand",
            "RearmWaitCommand",
            "ContinueCommand",
            "RetryStepCommand",
        )
        for name, rule in (("reason", REASON), ("evidence_ref", EVIDENCE_REF), ("expected_revision", REVISION))
    ],
    ("ReviewTaskCommand", "task_id", ID),
    ("ReviewTaskCommand", "expected_task_revision", REVISION),
    ("RetryStepCommand", "activation_id", ID),
    ("RetryStepCommand", "expected_step_revision", REVISION),
]


@pytest.mark.parametrize(("component", "name", "rule"), CONSTRAINTS, ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_field_states_the_limits_the_server_enforces(openapi, component, name, rule):
    described = _field(openapi, component, name)
    assert {key: described.get(key) for key in rule} == rule
    assert not described.get("nullable", False) or name == "deadline_seconds"


def test_null_is_described_where_the_server_takes_it_and_refused_where_it_refuses_it(openapi):
    def takes_null(component):
        result = _strict(_field(openapi, component, "result"), openapi["components"]["schemas"])
        return jsonschema.Draft7Validator(result).is_valid(None)

    assert takes_null("CompleteSucceeded") and not takes_null("CompleteFailed")
    assert takes_null("ResolveStepCommandSucceeded") and not takes_null("ResolveStepCommandFailed")
    assert not takes_null("ReviewTaskCommand")
    # Only a failure can be retried.
    retryable = _strict(_field(openapi, "CompleteSucceeded", "retryable"), openapi["components"]["schemas"])
    assert jsonschema.Draft7Validator(retryable).is_valid(False)
    assert not jsonschema.Draft7Validator(retryable).is_valid(True)


def test_paging_and_the_idempotency_key_are_bounded(openapi):
    for operation_id in OPERATIONS.values():
        if operation_id.startswith("list_"):
            assert _parameter(openapi, operation_id, "limit") == {"type": "integer", "minimum": 1, "maximum": 100}
            cursor = _parameter(openapi, operation_id, "cursor")
            assert (cursor["minLength"], cursor["maxLength"]) == (1, 1024) and cursor["pattern"].startswith("^")
    for operation_id in IDEMPOTENT:
        key = _parameter(openapi, operation_id, "Idempotency-Key")
        assert key["pattern"] == limits.IDEMPOTENCY_KEY_PATTERN and key["maxLength"] == limits.MAX_IDEMPOTENCY_KEY
        assert re.fullmatch(key["pattern"], "with space") is None


def test_every_request_body_states_the_size_depth_and_number_limits(openapi, settings):
    for item in openapi["paths"].values():
        for method, operation in item.items():
            if method != "post":
                continue
            text = operation["requestBody"]["description"]
            assert str(settings.WEAVE_MAX_BODY_BYTES) in text and f"{limits.MAX_JSON_DEPTH} levels" in text
            assert f"{limits.MAX_NUMBER_CHARS} characters" in text
            assert {"411", "413"} <= set(operation["responses"])


def test_every_link_names_a_described_operation_and_its_parameters(openapi):
    ids = {op["operationId"]: op for item in openapi["paths"].values() for op in item.values()}
    components = openapi["components"]["schemas"]
    linked = 0
    for operation in ids.values():
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                target = ids[link["operationId"]]
                assert set(link["parameters"]) <= {p["name"] for p in target.get("parameters", [])}
                body = _strict(
                    target.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}),
                    components,
                )
                properties = set().union(*(v.get("properties", {}) for v in body.get("oneOf", [body])))
                assert set(link.get("requestBody", {})) <= properties
                linked += 1
    assert linked >= 10


def test_the_review_cause_is_documented_with_every_code_the_engine_records(openapi):
    assert openapi["components"]["schemas"]["ReviewCause"]["enum"] == list(ReviewCause.values)
    detail = openapi["components"]["schemas"]["InstanceDetail"]["properties"]
    assert {"review_cause", "review_step_key", "review_since"} <= set(detail)


def test_the_probes_and_the_background_answer_exactly_as_described(api, openapi, issue_token, tenancy, monkeypatch):
    components = openapi["components"]["schemas"]

    def described(operation_id, status):
        _, _, operation = _operation(openapi, operation_id)
        return _strict(
            copy.deepcopy(operation["responses"][status]["content"]["application/json"]["schema"]), components
        )

    # The probes ask for no credential; the background's status does.
    assert not _operation(openapi, "get_liveness")[2].get("security")
    assert not _operation(openapi, "get_readiness")[2].get("security")
    assert {"bearerAuth": []} in _operation(openapi, "get_background")[2]["security"]
    jsonschema.validate(json.loads(api.get("/healthz").content), described("get_liveness", "200"))
    monkeypatch.setattr(readiness_module, "_migrated", False)
    recorded = MigrationRecorder.Migration.objects.filter(app="history").order_by("-id").first()
    recorded.delete()
    not_ready = api.get("/readyz")
    assert not_ready.status_code == 503
    jsonschema.validate(json.loads(not_ready.content), described("get_readiness", "503"))
    recorded.save()
    jsonschema.validate(json.loads(api.get("/readyz").content), described("get_readiness", "200"))

    runner = BackgroundProcess(kind=ProcessKind.RUNNER, host="node-1", pid=7)
    background_process_start(process=runner)
    worker = BackgroundProcess(kind=ProcessKind.WORKER, host="node-1", pid=8, queue="payments", namespace=tenancy[0])
    background_process_start(process=worker)
    worker.stopped_at = T0.replace(year=2027)
    background_process_beat(process=worker)
    answer = api.get("/v1/background", **bearer(issue_token().token))
    assert answer.status_code == 200 and len(answer.json()["data"]["processes"]) == 2
    jsonschema.validate(json.loads(answer.content), described("get_background", "200"))
    jsonschema.validate(json.loads(api.get("/v1/background").content), described("get_background", "401"))
