import datetime as dt
import json
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from core import clock
from history.credentials import credential_issue, identity_of_credential
from history.models import Operator, Scope
from history.tenancy import actor_id_for, namespace_ensure
from testkit.driver import Engine
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


@pytest.fixture(autouse=True)
def _clock_reset():
    """Tests move the one clock; every test starts and ends at the real time, whatever ran before it in its process
    (a runner subprocess keeps the real time: a campaign made an hour ahead would never be due for it)."""
    clock.set_offset(dt.timedelta(0))
    yield
    clock.set_offset(dt.timedelta(0))


@pytest.fixture
def tenancy(db):
    namespace, application, queues = namespace_ensure(name="acme", application="billing", queues=["payments"])
    return namespace, application, queues


@pytest.fixture
def issue_token(tenancy):
    """Issue a token in the test namespace: issue_token(scopes=[...], queues=...)."""
    namespace, application, _ = tenancy

    def issue(*, scopes=(Scope.READ,), queues="*", actor_id="a" * 32, **extra):
        return credential_issue(
            namespace_id=namespace.id,
            application_id=application.id,
            actor_id=actor_id,
            label="test",
            scopes=list(scopes),
            queue_access=queues,
            **extra,
        )

    return issue


@pytest.fixture
def recover_token(issue_token):
    """A credential holding workflows:recover (and read) on every queue."""
    return issue_token(scopes=[Scope.RECOVER, Scope.READ])


@pytest.fixture
def recoverer(recover_token):
    return identity_of_credential(recover_token.credential)


@pytest.fixture
def console_user(tenancy):
    """console_user("name", "operators") → a logged-in-able staff user acting in the test namespace."""
    namespace = tenancy[0]

    def make(name: str, *groups: str, queues="*"):
        user = User.objects.create_user(name, password="pw", is_staff=True)
        user.groups.set(Group.objects.filter(name__in=groups))
        actor_id = actor_id_for(namespace.name, name)  # as weave_bootstrap names a login's actor
        Operator.objects.create(user=user, namespace=namespace, actor_id=actor_id, queue_access=queues)
        return user

    return make


@pytest.fixture
def engine(db):
    """The engine driver over a namespace with a payments and a polls queue."""
    namespace, application, queues = namespace_ensure(name="acme", application="billing", queues=["payments", "polls"])
    return Engine(namespace, application, queues)


@pytest.fixture
def api():
    return APIClient()


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


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


@pytest.fixture
def reliability_report(record_property):
    """Record a test's own counts (``title``, {what: count}); the run prints them summed per title at its end."""

    def report(title: str, counts: dict) -> None:
        record_property("reliability", (title, dict(counts)))

    return report


def pytest_terminal_summary(terminalreporter):
    """The reliability counts of every test that recorded some, summed per title; works under xdist too."""
    # Each phase's report carries the properties recorded so far: keep the fullest one per test.
    recorded: dict[str, list] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            properties = [v for n, v in getattr(report, "user_properties", ()) if n == "reliability"]
            if len(properties) > len(recorded.get(getattr(report, "nodeid", ""), ())):
                recorded[report.nodeid] = properties
    totals: dict[str, dict] = {}
    for title, counts in (p for properties in recorded.values() for p in properties):
        merged = totals.setdefault(title, {})
        for what, count in counts.items():
            merged[what] = merged.get(what, 0) + count
    if totals:
        terminalreporter.section("reliability counts")
        for title, counts in sorted(totals.items()):
            terminalreporter.line(f"{title}: " + ", ".join(f"{count} {what}" for what, count in counts.items()))
