"""Every operation of the served OpenAPI document has its SDK method, and that method sends that operation.

The mapping is the SDK's own: each method names its ``operationId`` (``WeaveClient.operations()``), and an
operation it deliberately leaves out is in ``WITHOUT_METHOD`` with its reason. An operation added to the
server shows in the document and fails here until the SDK calls it or says why not.
"""

import inspect
import json
import re
from pathlib import Path

import pytest
from rest_framework.test import APIClient
from weave_sdk import NotFound, RawJSON, Unavailable, WeaveClient
from weave_sdk.client import WITHOUT_METHOD

from tests.sdk.mock import Server, Waits, client_for

W, A, S, OP, T, P = ("1" * 32, "3" * 32, "4" * 32, "5" * 32, "6" * 32, "7" * 32)
# An argument for every required parameter of an operation's method, by the parameter's name.
ARGUMENTS = {
    "workflow_id": W,
    "step_key": "charge",
    "activation_id": A,
    "signal_id": S,
    "operation": OP,
    "task_id": T,
    "proposal_id": P,
    "decision_id": P,
    "campaign_id": P,
    "queue": "payments",
    "idempotency_key": "key-1",
    "command": {},
    "worker": "worker-1",
    "attempt_id": A,
    "outcome": "SUCCEEDED",
    "result": RawJSON("1.10"),
    "reason": "checked",
    "expected_control_revision": 3,
    "text": "provider says pending",
    "assignee": "",
}
# The same values under the names the document's path templates give them.
PATH_VALUES = {
    "id": W,
    "instance_id": W,
    "key": "charge",
    "activation": A,
    "signal": S,
    "operation": OP,
    "task": T,
    "task_id": T,
    "proposal_id": P,
    "decision_id": P,
    "campaign_id": P,
    "queue": "payments",
}
NOT_FOUND = '{"request_id":"' + "b" * 32 + '","error":{"code":"NOT_FOUND","message":"no such thing"}}'
UNAVAILABLE = '{"request_id":"' + "b" * 32 + '","error":{"code":"UNAVAILABLE","message":"the database is unavailable"}}'


@pytest.fixture(scope="module")
def document(django_db_setup, django_db_blocker):
    """The served document, read once for the module (serving it reads and writes nothing)."""
    with django_db_blocker.unblock():
        response = APIClient().get("/v1/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def operations_of(document) -> dict[str, tuple[str, str, dict]]:
    """operationId → (HTTP method, path template, operation object) of every operation the document describes."""
    return {
        operation["operationId"]: (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def uncovered(operation_ids) -> set[str]:
    """The operations that have neither an SDK method nor a stated exclusion."""
    return set(operation_ids) - set(WeaveClient.operations()) - set(WITHOUT_METHOD)


def test_every_operation_of_the_served_document_has_an_sdk_method_or_a_stated_exclusion(document):
    described = set(operations_of(document))
    assert uncovered(described) == set()
    # A method or an exclusion for an operation the document does not describe (any more) is stale.
    assert set(WeaveClient.operations()) <= described
    assert set(WITHOUT_METHOD) <= described - set(WeaveClient.operations())
    assert all(reason.strip() for reason in WITHOUT_METHOD.values())


def test_an_operation_the_sdk_does_not_call_is_reported_by_name(document):
    described = set(operations_of(document))
    assert uncovered(described | {"archive_workflow"}) == {"archive_workflow"}


def _call(client: WeaveClient, name: str) -> None:
    """Call the method ``name`` with an argument for each of its required parameters."""
    method = getattr(client, name)
    positional, keywords = [], {}
    for parameter in inspect.signature(method).parameters.values():
        if parameter.default is not inspect.Parameter.empty or parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        assert parameter.name in ARGUMENTS, f"give ARGUMENTS a value for {name}({parameter.name})"
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            keywords[parameter.name] = ARGUMENTS[parameter.name]
        else:
            positional.append(ARGUMENTS[parameter.name])
    method(*positional, **keywords)


@pytest.mark.parametrize(("operation_id", "name"), sorted(WeaveClient.operations().items()))
def test_each_method_sends_its_operation_and_re_sends_after_a_503_only_a_read_or_a_keyed_write(
    document, operation_id, name
):
    method, template, described = operations_of(document)[operation_id]
    keyed = any(p["in"] == "header" and p["name"] == "Idempotency-Key" for p in described.get("parameters", ()))
    may_resend = method == "GET" or keyed
    server, waits = Server((503, UNAVAILABLE), (404, NOT_FOUND)), Waits()
    with pytest.raises(NotFound if may_resend else Unavailable):
        _call(client_for(server, waits, attempts=2), name)
    assert len(server.requests) == (2 if may_resend else 1) and len(waits.waited) == len(server.requests) - 1
    # What is sent again is the same request: same URL, same bytes, same key.
    assert len({(str(r.url), r.content, r.headers.get("Idempotency-Key")) for r in server.requests}) == 1
    for request in server.requests:
        assert (request.method, request.url.path) == (method, template.format(**PATH_VALUES))
        assert ("Idempotency-Key" in request.headers) is keyed
        assert bool(request.content) is ("requestBody" in described)


def test_the_sdk_readme_lists_every_operation_with_its_method():
    readme = (Path(__file__).resolve().parents[2] / "sdk" / "README.md").read_text()
    listed = dict(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)\(", readme, flags=re.MULTILINE))
    assert listed == WeaveClient.operations()
