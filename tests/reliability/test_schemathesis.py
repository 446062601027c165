"""The served OpenAPI description against the running API: schemathesis generates requests for every operation
of /v1/openapi.json and no answer is a 5xx or strays from what the description says.

Requests go through the WSGI application in process (same database connection as the test), with a bearer
token holding every scope; half the cases have their path ids replaced by a real instance's, so reads reach
real rows and not only 404s.
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from history.models import Scope
from tests.recovery import states

pytestmark = pytest.mark.django_db


@pytest.fixture
def in_process_connection():
    """Keep the test's connection (and its transaction) across WSGI requests, as Django's test client does."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


# Loaded at collection (one test per operation); the lazy fixture loader does not run under this pytest.
schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", get_wsgi_application())


@pytest.fixture
def real_ids(tenancy):
    """Path values of real rows, by whether the path names a signal: each set belongs to one instance."""
    poll = states.poll_pending_reviewed_state(tenancy)
    signal = states.signal_contract_violation_state(tenancy)
    poll_ids = {
        "id": poll.instance.id,
        "instance_id": poll.instance.id,
        "key": poll.step.key,
        "activation": poll.activation.id,
        "task": poll.task.id,
        "task_id": poll.task.id,
        "queue": states.QUEUE,
    }
    return {False: poll_ids, True: {"id": signal.instance.id, "signal": signal.signals[0].id}}


@pytest.fixture
def auth_header(issue_token):
    return {"Authorization": f"Bearer {issue_token(scopes=[s.value for s in Scope]).token}"}


@schema.parametrize()
@schema.given(real=st.booleans())
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
def test_every_operation_answers_without_5xx_and_as_described(case, real, real_ids, auth_header, in_process_connection):
    if real and case.path_parameters:
        # The real instance's rows only make sense together, so every segment is replaced, or none.
        ids = real_ids["signal" in case.path_parameters]
        case.path_parameters = {name: ids.get(name, value) for name, value in case.path_parameters.items()}
    response = case.call(headers=auth_header)
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    case.validate_response(response, checks=checks, headers=auth_header)


def _describes_its_answers(method: str, operation: dict) -> bool:
    """One JSON success, 401 (every operation authenticates), 400 wherever a parameter or body can be malformed,
    every error in the error envelope, and a JSON request body on every POST."""
    responses = operation["responses"]
    successes = [status for status in responses if status.startswith("2")]
    malformable = method == "post" or bool(operation.get("parameters"))
    errors_enveloped = all(
        responses[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorEnvelope"}
        for status in responses
        if not status.startswith("2")
    )
    body = operation.get("requestBody", {}).get("content", {})
    return (
        len(successes) == 1
        and "content" in responses[successes[0]]
        and "401" in responses
        and ("400" in responses or not malformable)
        and errors_enveloped
        and (method != "post" or "application/json" in body)
    )


def test_every_operation_documents_its_json_answer_and_error_statuses(api):
    described = api.get("/v1/openapi.json").json()
    lacking = sorted(
        f"{method.upper()} {path}"
        for path, operations in described["paths"].items()
        for method, operation in operations.items()
        if not _describes_its_answers(method, operation)
    )
    assert lacking == []
