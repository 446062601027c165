"""The OpenAPI description is served offline and describes the real responses and errors."""

import copy
import datetime as dt
import json
import re

import httpx
import jsonschema
import pytest

from history.models import ActivationState, AttemptState, Disposition, SignalState, Step, Wait, WorkflowInstance
from tests.conftest import bearer
from tests.factories import AttemptFactory, SignalFactory, activate, step_of
from tests.history.conftest import ENDPOINTS

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
}


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
        assert names == ({"limit", "cursor"} if operation_id.startswith("list_") else set())


def test_swagger_ui_is_served_offline_from_the_sidecar(api, db):
    response = api.get("/v1/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in page
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page
    assert "/v1/openapi.json" in page


def _fill_optional_fields(history_rows):
    """Give every optional field of the read bodies a value, so the strict check sees them all."""
    workflow = history_rows.workflow
    WorkflowInstance.objects.filter(id=workflow.id).update(
        stop_kind="CANCEL", deadline_at=T0, review_reason="lease expired", completed_at=T0
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


@pytest.mark.django_db(transaction=True)
def test_the_swagger_ui_assets_come_from_this_server(live_server):
    page = httpx.get(f"{live_server.url}/v1/docs/").text
    assets = re.findall(r'(?:src|href)="(/static/drf_spectacular_sidecar/[^"]+)"', page)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
    for asset in assets:
        assert httpx.get(f"{live_server.url}{asset}").status_code == 200, asset
