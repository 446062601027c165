import json

import pytest

from history.models import Scope
from tests.conftest import bearer
from tests.factories import (
    WorkflowInstanceFactory,
    poll_step,
    signal_step,
    task_step,
    timer_step,
)

STEPS = [
    task_step("charge"),
    poll_step("settle", after=["charge"]),
    signal_step("approve", after=["settle"]),
    timer_step("cool-off", after=["approve"]),
]


@pytest.fixture
def namespace(tenancy):
    return tenancy[0]


@pytest.fixture
def workflow(namespace):
    """An instance of a definition with one step of each kind (charge, settle, approve, cool-off)."""
    return WorkflowInstanceFactory(namespace=namespace, definition__spec={"steps": STEPS})


@pytest.fixture
def reader(issue_token):
    return issue_token(scopes=[Scope.READ]).token


@pytest.fixture
def auditor(issue_token):
    return issue_token(scopes=[Scope.AUDIT_READ]).token


@pytest.fixture
def call(api):
    """call(path, token) -> (status, parsed envelope); the envelope shape is checked every time."""

    def do(path, token, **query):
        response = api.get(path, query or None, **(bearer(token) if token else {}))
        body = json.loads(response.content)
        assert body["request_id"] == response["X-Request-Id"]
        assert set(body) == ({"request_id", "data"} if response.status_code == 200 else {"request_id", "error"})
        return response.status_code, body

    return do


def error_of(result):
    status, body = result
    return status, body["error"]["code"], body["error"].get("field")
