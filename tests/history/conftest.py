import json
from types import SimpleNamespace

import pytest

from history.models import Scope
from tests.conftest import bearer
from tests.factories import (
    WorkflowInstanceFactory,
    WorkflowOperationFactory,
    accept_signal,
    activate,
    poll_round,
    poll_step,
    signal_step,
    step_of,
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


@pytest.fixture
def history_rows(workflow):
    """One row of every kind the endpoints read, with the paths to read them."""
    charge = activate(step_of(workflow, "charge"))
    poll = activate(step_of(workflow, "settle"))
    poll_round(poll, 1)
    signal, operation = accept_signal(workflow)
    WorkflowOperationFactory(workflow=workflow)
    w = f"/v1/workflows/{workflow.id}"
    paths = {
        "instance": (f"{w}", Scope.READ, False),
        "activations": (f"{w}/steps/charge/activations", Scope.READ, True),
        "activation": (f"{w}/steps/charge/activations/{charge.id}", Scope.READ, False),
        "rounds": (f"{w}/steps/settle/activations/{poll.id}/rounds", Scope.READ, True),
        "signals": (f"{w}/signals", Scope.READ, True),
        "signal": (f"{w}/signals/{signal.id}", Scope.READ, False),
        "signal_operations": (f"{w}/signals/{signal.id}/operations", Scope.AUDIT_READ, True),
        "signal_operation": (f"{w}/signals/{signal.id}/operations/{operation.id}", Scope.AUDIT_READ, False),
        "task": (f"{w}/tasks/{charge.task_id}", Scope.READ, False),
        "operations": (f"{w}/operations", Scope.AUDIT_READ, True),
        "events": (f"{w}/events", Scope.READ, True),
    }
    return SimpleNamespace(workflow=workflow, charge=charge, poll=poll, signal=signal, operation=operation, paths=paths)


ENDPOINTS = [
    "instance",
    "activations",
    "activation",
    "rounds",
    "signals",
    "signal",
    "signal_operations",
    "signal_operation",
    "task",
    "operations",
    "events",
]
LISTS = ["activations", "rounds", "signals", "signal_operations", "operations", "events"]
DETAILS = [name for name in ENDPOINTS if name not in LISTS]


@pytest.fixture
def token_for(issue_token):
    return lambda scope, **kw: issue_token(scopes=[scope], **kw).token
