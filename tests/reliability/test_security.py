"""Security sweep over every API endpoint and every admin page.

The endpoint list is read from the URLconf and must equal ENDPOINTS, so a new route cannot be
left out; the admin pages are read from the admin site's registry and the instance admin's
own URLs. Refusals come in the order 401 → 403 → 400 → 404 and write nothing; tokens
are kept only as digests, never logged; cursors cannot be forged or moved.
"""

import datetime as dt
import hashlib
import itertools
import json
import logging
import re
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import StringIO
from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.core import signing
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLResolver, get_resolver, reverse

from console.admin import CONTROLS
from console.models import Case, CaseMember
from core import clock, exactjson
from core.identity import Identity
from engine.definitions import definition_create
from history import models
from history.annotations import note_add
from history.background import background_process_start
from history.credentials import credential_issue
from history.models import BackgroundProcess, Credential, ProcessKind, Scope
from history.signatures import signature_record
from history.tenancy import namespace_ensure
from recovery.decisions import decision_make
from recovery.operations import OPERATIONS
from testkit import requests as rq
from testkit.requests import review as rq_review
from testkit.states import task_unknown_state
from tests.conftest import bearer
from tests.factories import (
    AttemptFactory,
    ExecutionAuditFactory,
    InboxRecordFactory,
    QueueFactory,
    SignalOperationFactory,
    WorkflowDefinitionFactory,
    WorkflowInstanceFactory,
    WorkflowOperationFactory,
    accept_signal,
    activate,
    poll_round,
    poll_step,
    signal_step,
    step_of,
    task_step,
)
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

ALL_SCOPES = list(Scope.values)
# The definition spans two queues, so a credential missing either one may not see its instances.
STEPS = [task_step("charge"), poll_step("settle", queue="ledger"), signal_step("approve", after=["settle"])]
REASON = {"reason": "verified with the provider", "evidence_ref": "ticket:SEC-7"}


# ---- the world every API request runs against ---------------------------------------------


@pytest.fixture
def security_world(tenancy):
    """Namespace acme (queues payments, ledger) with one instance of every history kind, and a rival namespace.

    ``instance`` is in review with a leased charge task, a POLL activation with two rounds, two
    signals (one with two audit rows) and two workflow operations, so every list has a second
    page; ``sibling`` shares its definition; ``runnable`` has a claimable task on payments.
    """
    namespace, application, _ = tenancy
    QueueFactory(namespace=namespace, name="ledger")
    definition = WorkflowDefinitionFactory(namespace=namespace, spec={"steps": STEPS})
    instance = WorkflowInstanceFactory(namespace=namespace, definition=definition, state="NEEDS_REVIEW")
    sibling = WorkflowInstanceFactory(namespace=namespace, definition=definition, state="NEEDS_REVIEW")
    runnable = WorkflowInstanceFactory(namespace=namespace, definition=definition, state="RUNNING")
    for reviewed, cause in ((instance, "task_outcome_unknown"), (sibling, "wait_expired")):  # two: a second page
        reviewed.failure_signature_id = signature_record(
            namespace_id=namespace.id,
            definition_id=definition.id,
            step_key="charge",
            cause=cause,
            reason=f"{cause} of {reviewed.id}",
            root=None,
            now=clock.now(),
        )
        reviewed.save(update_fields=["failure_signature"])
    activate(step_of(runnable, "charge"))
    activate(step_of(instance, "charge"), state="FAILED", task={"state": "FAILED"})
    charge = activate(step_of(instance, "charge"), task={"state": "LEASED", "attempt_count": 1})
    attempt = AttemptFactory(task=charge.task, lease_expires_at=clock.now() + dt.timedelta(hours=1))
    earlier_poll = activate(step_of(instance, "settle"), state="FAILED")
    poll_round(earlier_poll, 1)
    poll = activate(step_of(instance, "settle"))
    poll_round(poll, 1)
    poll_round(poll, 2)
    signal, operation = accept_signal(instance)
    SignalOperationFactory(signal=signal)
    other_signal, _ = accept_signal(instance)
    workflow_operations = [WorkflowOperationFactory(workflow=instance) for _ in range(2)]
    annotator = Identity(namespace_id=namespace.id, actor_id="5" * 32, scopes=frozenset({Scope.ANNOTATE}), queues=None)
    for n in (1, 2):  # two notes: the notes list has a second page
        note_add(identity=annotator, instance_id=instance.id, command={"text": f"note {n}"}, idempotency_key=f"n-{n}")
    proposal = models.Proposal.objects.create(  # proposed by an actor none of the swept tokens act as
        namespace=namespace,
        workflow=instance,
        operation="continue",
        command=exactjson.dumps({"expected_revision": str(instance.revision), **REASON, "review_resolved": True}),
        preview={},
        reason=REASON["reason"],
        expected_revision=instance.revision,
        proposed_by="6" * 32,
        expires_at=clock.now() + dt.timedelta(hours=1),
    )
    decision = models.Decision.objects.create(  # made by an actor none of the swept tokens act as
        namespace=namespace,
        workflow=instance,
        kind="retry",
        command=exactjson.dumps(_decision_body(instance)),
        reason=REASON["reason"],
        actor_id="6" * 32,
        state="PROPOSED",  # held under four eyes: the swept tokens may answer it
        expires_at=clock.now() + dt.timedelta(hours=1),
    )
    startable = definition_create(
        namespace_id=namespace.id,
        document={
            "name": "payment",
            "application": application.name,
            "steps": [{"key": "charge", "kind": "TASK", "handler": "demo.echo", "queue": "payments"}],
        },
    )
    rival = namespace_ensure(name="rival", application="billing", queues=["payments", "ledger"])[0]
    instance.refresh_from_db()
    return SimpleNamespace(
        namespace=namespace,
        application=application,
        rival=rival,
        definition=definition,
        instance=instance,
        sibling=sibling,
        runnable=runnable,
        charge=charge,
        attempt=attempt,
        poll=poll,
        earlier_poll=earlier_poll,
        signal=signal,
        other_signal=other_signal,
        operation=operation,
        workflow_operation=workflow_operations[0],
        startable=startable,
        ids={
            "instance": instance.id,
            "charge_activation": charge.id,
            "poll_activation": poll.id,
            "signal": signal.id,
            "signal_operation": operation.id,
            "charge_task": charge.task_id,
            "charge": "charge",
            "settle": "settle",
            "payments": "payments",
            "sibling": sibling.id,
            "earlier_poll_activation": earlier_poll.id,
            "other_signal": other_signal.id,
            "proposal": proposal.id,
            "decision": decision.id,
            # Two campaigns (the list has a second page), the first of three items (so has its ledger).
            "campaign": _campaign_of(namespace, [instance, sibling, runnable]),
            "other_campaign": _campaign_of(namespace, [instance]),
        },
    )


def _issue(namespace, *, scopes=ALL_SCOPES, queues="*", **extra) -> str:
    return credential_issue(
        namespace_id=namespace.id,
        application_id=None,
        actor_id="5" * 32,
        label="security sweep",
        scopes=list(scopes),
        queue_access=queues,
        **extra,
    ).token


# ---- the endpoints ---------------------------------------------------------------------------


def _decision(world, key="charge") -> dict:
    step = step_of(world.instance, key)
    return {
        "expected_revision": str(world.instance.revision),
        **REASON,
        "step_key": key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
    }


RECOVERY_BODIES: dict[str, Callable] = {
    "review-task": lambda w: {
        "expected_revision": str(w.instance.revision),
        **REASON,
        "task_id": w.charge.task_id,
        "expected_task_revision": str(w.charge.task.revision),
        "execution_settled": True,
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
    },
    "resolve-step": lambda w: (
        _decision(w) | {"execution_settled": True, "conclusion": "SUCCEEDED", "result": {"paid": True}}
    ),
    "continue-poll": lambda w: _decision(w, "settle") | {"pending_confirmed": True},
    "rearm-wait": lambda w: _decision(w) | {"wait_verified": True},
    "continue": lambda w: {"expected_revision": str(w.instance.revision), **REASON, "review_resolved": True},
    "retry-step": lambda w: _decision(w) | {"safe_to_retry": True},
}


def _decision_body(instance) -> dict:
    return {
        "kind": "retry",
        "step_key": "charge",
        "expected_revision": str(instance.revision),
        **REASON,
        "declared": True,
    }


def _control_body(world) -> dict:
    return {"expected_control_revision": str(world.instance.control_revision), "reason": "maintenance window"}


def _signal_body(world) -> dict:
    return {
        "name": "approved",
        "payload_version": "v1",
        "payload": {"approved": True},
        "correlation_key": "o-1",
        "target_step_key": "approve",
        "reason": "finance approved",
    }


@dataclass(frozen=True)
class Endpoint:
    route: str
    method: str
    # None: any valid credential; PUBLIC: no credential at all.
    scope: str | None
    # What hides it from a caller: the instance (namespace + every definition queue), the
    # task's namespace and queue, the queue, the startable definition, a background worker's namespace and
    # queue, or nothing.
    guard: str
    args: dict = field(default_factory=dict)
    body: Callable | None = None
    list_kind: str = ""
    # Another scope that is enough on its own (a worker reads the source of its queue's tasks).
    also: str = ""

    @property
    def name(self) -> str:
        return f"{self.method} /{self.route}"

    def path(self, world, **replace) -> str:
        values = {placeholder: world.ids[key] for placeholder, key in self.args.items()} | replace
        return "/" + re.sub(r"<str:(\w+)>", lambda m: values[m.group(1)], self.route)


def _no_body(world) -> dict:
    return {}


def _campaign_body(world) -> dict:
    """A campaign of the instance, named in its selection."""
    return {
        "title": "settled charges",
        "kind": "retry",
        "step_key": "charge",
        "reason": "the provider confirmed nothing was charged",
        "evidence_ref": "ticket:OPS-1",
        "declared": True,
        "selection": {"workflows": [world.ids["instance"]]},
    }


PUBLIC = "public"
W = "v1/workflows/<str:id>"
ON_INSTANCE = {"id": "instance"}
ON_CAMPAIGN = {"campaign_id": "campaign"}
ENDPOINTS = [
    Endpoint("v1/credentials/self", "GET", None, "self"),
    Endpoint("healthz", "GET", PUBLIC, PUBLIC),
    Endpoint("readyz", "GET", PUBLIC, PUBLIC),
    # Every runner, and only the workers of the caller's namespace on its queues.
    Endpoint("v1/background", "GET", Scope.READ, "background"),
    Endpoint("v1/openapi.json", "GET", PUBLIC, PUBLIC),
    Endpoint("v1/docs/", "GET", PUBLIC, PUBLIC),
    Endpoint("v1/", "GET", PUBLIC, PUBLIC),
    Endpoint(W, "GET", Scope.READ, "instance", ON_INSTANCE),
    Endpoint(
        f"{W}/steps/<str:key>/activations",
        "GET",
        Scope.READ,
        "instance",
        ON_INSTANCE | {"key": "charge"},
        list_kind="activations",
    ),
    Endpoint(
        f"{W}/steps/<str:key>/activations/<str:activation>",
        "GET",
        Scope.READ,
        "instance",
        ON_INSTANCE | {"key": "charge", "activation": "charge_activation"},
    ),
    Endpoint(
        f"{W}/steps/<str:key>/activations/<str:activation>/rounds",
        "GET",
        Scope.READ,
        "instance",
        ON_INSTANCE | {"key": "settle", "activation": "poll_activation"},
        list_kind="rounds",
    ),
    Endpoint(f"{W}/signals", "GET", Scope.READ, "instance", ON_INSTANCE, list_kind="signals"),
    Endpoint(f"{W}/signals", "POST", Scope.WRITE, "instance", ON_INSTANCE, body=_signal_body),
    Endpoint(f"{W}/signals/<str:signal>", "GET", Scope.READ, "instance", ON_INSTANCE | {"signal": "signal"}),
    Endpoint(
        f"{W}/signals/<str:signal>/operations",
        "GET",
        Scope.AUDIT_READ,
        "instance",
        ON_INSTANCE | {"signal": "signal"},
        list_kind="signal_operations",
    ),
    Endpoint(
        f"{W}/signals/<str:signal>/operations/<str:operation>",
        "GET",
        Scope.AUDIT_READ,
        "instance",
        ON_INSTANCE | {"signal": "signal", "operation": "signal_operation"},
    ),
    Endpoint(f"{W}/tasks/<str:task>", "GET", Scope.READ, "instance", ON_INSTANCE | {"task": "charge_task"}),
    Endpoint(f"{W}/operations", "GET", Scope.AUDIT_READ, "instance", ON_INSTANCE, list_kind="operations"),
    Endpoint(f"{W}/events", "GET", Scope.READ, "instance", ON_INSTANCE, list_kind="events"),
    Endpoint(f"{W}/notes", "GET", Scope.READ, "instance", ON_INSTANCE, list_kind="notes"),
    *[
        Endpoint(f"{W}/{action}", "POST", Scope.ANNOTATE, "instance", ON_INSTANCE, body=body, also=Scope.RECOVER)
        for action, body in (
            ("notes", lambda w: {"text": "checked with the provider", "evidence_ref": "ticket:SEC-7"}),
            ("acknowledge", lambda w: {}),
            ("assign", lambda w: {"assignee": ""}),
        )
    ],
    Endpoint(
        f"{W}/decisions", "POST", Scope.RECOVER, "instance", ON_INSTANCE, body=lambda w: _decision_body(w.instance)
    ),
    Endpoint(
        f"{W}/decisions/<str:decision_id>",
        "GET",
        Scope.READ,
        "instance",
        ON_INSTANCE | {"decision_id": "decision"},
        also=Scope.RECOVER,
    ),
    *[
        Endpoint(
            f"{W}/decisions/<str:decision_id>/{answer}",
            "POST",
            Scope.RECOVER,
            "instance",
            ON_INSTANCE | {"decision_id": "decision"},
            lambda w, body=body: body,
        )
        for answer, body in (("approve", {}), ("reject", {"reason": "not this way"}))
    ],
    Endpoint("v1/workflows", "GET", Scope.READ, "namespace", list_kind="workflows"),
    Endpoint("v1/workflows/review-summary", "GET", Scope.READ, "namespace"),
    Endpoint("v1/signatures", "GET", Scope.READ, "namespace", list_kind="signatures"),
    Endpoint(
        "v1/workflows",
        "POST",
        Scope.WRITE,
        "definition",
        body=lambda w: {"definition": w.startable.name, "input": {"order": "o-9"}},
    ),
    *[
        Endpoint(f"{W}/{action}", "POST", Scope.CONTROL, "instance", ON_INSTANCE, body=_control_body)
        for action in ("pause", "resume", "cancel")
    ],
    Endpoint(
        "v1/queues/<str:queue>/claim",
        "POST",
        Scope.TASKS_WORK,
        "queue",
        {"queue": "payments"},
        lambda w: {"worker": "w-1"},
    ),
    Endpoint(
        "v1/tasks/<str:task_id>/source", "GET", Scope.READ, "task", {"task_id": "charge_task"}, also=Scope.TASKS_WORK
    ),
    Endpoint(
        "v1/tasks/<str:task_id>/heartbeat",
        "POST",
        Scope.TASKS_WORK,
        "task",
        {"task_id": "charge_task"},
        lambda w: {"attempt_id": w.attempt.id, "lease_seconds": 60},
    ),
    Endpoint(
        "v1/tasks/<str:task_id>/complete",
        "POST",
        Scope.TASKS_WORK,
        "task",
        {"task_id": "charge_task"},
        lambda w: {"attempt_id": w.attempt.id, "outcome": "SUCCEEDED", "result": {"paid": True}},
    ),
    *[
        Endpoint(
            f"v1/workflows/<str:instance_id>/recovery/{name}",
            "POST",
            Scope.RECOVER,
            "instance",
            {"instance_id": "instance"},
            body,
        )
        for name, body in RECOVERY_BODIES.items()
    ],
    Endpoint("v1/campaigns", "GET", Scope.READ, "campaigns", list_kind="campaigns", also=Scope.RECOVER),
    Endpoint("v1/campaigns/<str:campaign_id>", "GET", Scope.READ, "campaign", ON_CAMPAIGN, also=Scope.RECOVER),
    Endpoint(
        "v1/campaigns/<str:campaign_id>/items",
        "GET",
        Scope.READ,
        "campaign",
        ON_CAMPAIGN,
        list_kind="campaign_items",
        also=Scope.RECOVER,
    ),
    Endpoint("v1/campaigns", "POST", Scope.RECOVER, "selection", body=_campaign_body),
    *[
        Endpoint(f"v1/campaigns/<str:campaign_id>/{action}", "POST", Scope.RECOVER, "campaign", ON_CAMPAIGN, _no_body)
        for action in ("approve", "start", "pause", "resume", "widen", "cancel")
    ],
    *[
        Endpoint(
            f"v1/workflows/<str:instance_id>/proposals/<str:proposal_id>/{decision}",
            "POST",
            Scope.RECOVER,
            "instance",
            {"instance_id": "instance", "proposal_id": "proposal"},
            lambda w, body=body: body,
        )
        for decision, body in (("approve", {}), ("reject", {"reason": "not this way"}))
    ],
]
GUARDED = [e for e in ENDPOINTS if e.scope not in (None, PUBLIC)]
LISTS = [e for e in ENDPOINTS if e.list_kind]


def served_endpoints() -> set[tuple[str, str]]:
    """(route, method) of every view the URLconf serves outside the admin."""
    found = set()

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.app_name != "admin":
                    walk(pattern.url_patterns, prefix + str(pattern.pattern))
                continue
            view = pattern.callback.view_class
            for method in view.http_method_names:
                if method not in ("options", "head") and hasattr(view, method):
                    found.add((prefix + str(pattern.pattern), method.upper()))

    walk(get_resolver().url_patterns, "")
    return found


@pytest.fixture
def send(api, security_world):
    """send(endpoint, token, path=…, body=…) → the response; bodies go as exact JSON, each with a new key."""
    keys = itertools.count(1)

    def do(endpoint: Endpoint, token: str | None, *, path=None, body=None):
        headers = {"HTTP_IDEMPOTENCY_KEY": f"sweep-{next(keys)}"} | (bearer(token) if token else {})
        path = path or endpoint.path(security_world)
        if endpoint.method == "GET":
            return api.get(path, **headers)
        payload = body if body is not None else endpoint.body(security_world)
        text = payload if isinstance(payload, str) else exactjson.dumps(payload)
        return api.post(path, data=text, content_type="application/json", **headers)

    return do


def _error(response) -> tuple[int, str, str | None, str]:
    """(status, code, field, message) of an error answer."""
    error = json.loads(response.content)["error"]
    return response.status_code, error["code"], error.get("field"), error["message"]


@contextmanager
def _nothing_written():
    before = history_digest()
    yield
    assert history_digest() == before, "a refused request wrote"


def _accepted(response) -> bool:
    return response.status_code not in (401, 403, 404)


def test_the_swept_endpoints_are_exactly_what_the_urlconf_serves():
    assert served_endpoints() == {(e.route, e.method) for e in ENDPOINTS}
    assert {e.route.rsplit("/", 1)[1] for e in ENDPOINTS if "/recovery/" in e.route} == set(OPERATIONS)


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.scope == PUBLIC], ids=lambda e: e.name)
def test_the_api_description_is_served_without_a_token(send, endpoint):
    assert send(endpoint, None).status_code == 200


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.scope != PUBLIC], ids=lambda e: e.name)
def test_a_revoked_or_expired_token_stops_working_on_the_very_next_request(send, security_world, endpoint):
    revoked = _issue(security_world.namespace)
    expiring = _issue(security_world.namespace, expires_at=clock.now() + dt.timedelta(minutes=5))
    assert _accepted(send(endpoint, revoked)) and _accepted(send(endpoint, expiring))
    Credential.objects.filter(key_id=revoked.split("_")[1]).update(revoked_at=clock.now())
    with _nothing_written():
        assert _error(send(endpoint, revoked))[:3] == (401, "UNAUTHENTICATED", None)
        with clock.moved(dt.timedelta(minutes=5)):
            assert _error(send(endpoint, expiring))[:3] == (401, "UNAUTHENTICATED", None)


@pytest.mark.parametrize("endpoint", GUARDED, ids=lambda e: e.name)
def test_refusals_come_in_spec_order_401_then_403_then_400_and_write_nothing(send, security_world, endpoint):
    w = security_world
    bad = {"path": endpoint.path(w) + "?bogus=1"} if endpoint.method == "GET" else {"body": "[]"}
    enough = (endpoint.scope, endpoint.also)
    lacking = {ns: _issue(ns, scopes=[s for s in ALL_SCOPES if s not in enough]) for ns in (w.namespace, w.rival)}
    rival = _issue(w.rival)
    with _nothing_written():
        assert _error(send(endpoint, None, **bad))[:3] == (401, "UNAUTHENTICATED", None)
        assert _error(send(endpoint, lacking[w.namespace]))[:3] == (403, "PERMISSION_DENIED", None)
        for token in lacking.values():
            assert _error(send(endpoint, token, **bad))[:3] == (403, "PERMISSION_DENIED", None)
        assert _error(send(endpoint, rival, **bad))[:2] == (400, "INVALID_ARGUMENT")
    for scope in filter(None, enough):
        assert _accepted(send(endpoint, _issue(w.namespace, scopes=[scope])))


# What hides a resource, the request naming one that does not exist, and who may not see it.
MISSING = {
    "instance": ("instance", "e" * 32),
    "task": ("charge_task", "e" * 32),
    "queue": ("payments", "nowhere"),
    "campaign": ("campaign", "e" * 32),
}
HIDDEN_FROM = {
    "instance": [("rival", "*"), ("namespace", ["payments"]), ("namespace", ["ledger"])],
    # A campaign's selection names the instance.
    "selection": [("rival", "*"), ("namespace", ["payments"]), ("namespace", ["ledger"])],
    "task": [("rival", "*"), ("namespace", ["ledger"])],
    "definition": [("rival", "*"), ("namespace", ["ledger"])],
    "queue": [("namespace", ["ledger"])],
    # A campaign's instances are on the payments queue (and its definitions' others).
    "campaign": [("rival", "*"), ("namespace", ["ledger"]), ("namespace", ["payments"])],
}


def _missing_request(endpoint: Endpoint, world) -> tuple[dict, str, str]:
    """The same request naming a resource that does not exist, with (real, missing) names."""
    if endpoint.guard == "definition":
        return {"body": endpoint.body(world) | {"definition": "nowhere"}}, world.startable.name, "nowhere"
    if endpoint.guard == "selection":
        missing = {"workflows": ["e" * 32]}
        return {"body": endpoint.body(world) | {"selection": missing}}, world.ids["instance"], "e" * 32
    key, missing = MISSING[endpoint.guard]
    placeholder = next(p for p, k in endpoint.args.items() if k == key)
    return {"path": endpoint.path(world, **{placeholder: missing})}, world.ids[key], missing


@pytest.mark.parametrize("endpoint", [e for e in GUARDED if e.guard in HIDDEN_FROM], ids=lambda e: e.name)
def test_another_namespace_or_a_missing_queue_gets_exactly_the_answer_of_a_missing_resource(
    send, security_world, endpoint
):
    w = security_world
    request, real, missing = _missing_request(endpoint, w)
    token = _issue(w.namespace)
    hidden_from = [
        (namespace, queues, _issue(getattr(w, namespace), queues=queues))
        for namespace, queues in HIDDEN_FROM[endpoint.guard]
    ]
    with _nothing_written():
        absent = _error(send(endpoint, token, **request))
        assert absent[:2] == (404, "NOT_FOUND")
        for namespace, queues, hidden_token in hidden_from:
            hidden = _error(send(endpoint, hidden_token))
            assert (*hidden[:3], hidden[3].replace(real, missing)) == absent, (namespace, queues)
    assert _accepted(send(endpoint, _issue(w.namespace, queues=["ledger", "payments"])))


def test_a_namespace_wide_read_shows_nothing_of_an_instance_hidden_from_the_caller(send, security_world):
    w = security_world
    query, summary, signatures = (e for e in ENDPOINTS if e.guard == "namespace")
    instance = w.ids["instance"]
    assert instance in {item["id"] for item in send(query, _issue(w.namespace)).json()["data"]["items"]}
    # The signatures of the instance's definition: what made its instances (and its siblings) enter review.
    definition = models.WorkflowInstance.objects.get(pk=instance).definition_id
    hidden_signatures = set(
        models.FailureSignature.objects.filter(definition_id=definition).values_list("id", flat=True)
    )
    listed = send(signatures, _issue(w.namespace), path=f"/{signatures.route}?limit=100").json()["data"]["items"]
    assert hidden_signatures and hidden_signatures <= {item["id"] for item in listed}
    for namespace, queues in HIDDEN_FROM["instance"]:
        token = _issue(getattr(w, namespace), queues=queues)
        with _nothing_written():
            items = send(query, token, path=f"/{query.route}?limit=100").json()["data"]["items"]
            assert instance not in {item["id"] for item in items}, (namespace, queues)
            assert send(summary, token).status_code == 200
            listed = send(signatures, token, path=f"/{signatures.route}?limit=100").json()["data"]["items"]
            assert not hidden_signatures & {item["id"] for item in listed}, (namespace, queues)


def test_the_background_shows_every_runner_and_only_the_workers_of_the_callers_namespace_and_queues(
    send, security_world
):
    w = security_world
    status = next(e for e in ENDPOINTS if e.guard == "background")
    processes = {}
    for name, kind, namespace, queue in (
        ("runner", ProcessKind.RUNNER, None, ""),
        ("payments", ProcessKind.WORKER, w.namespace, "payments"),
        ("ledger", ProcessKind.WORKER, w.namespace, "ledger"),
        ("rival", ProcessKind.WORKER, w.rival, "payments"),
    ):
        processes[name] = BackgroundProcess(
            kind=kind, host="node-1", pid=len(processes), namespace=namespace, queue=queue
        )
        background_process_start(process=processes[name])
    names = {process.id: name for name, process in processes.items()}
    for namespace, queues, shown in (
        ("namespace", "*", {"runner", "payments", "ledger"}),
        ("namespace", ["ledger"], {"runner", "ledger"}),
        ("rival", "*", {"runner", "rival"}),
    ):
        items = send(status, _issue(getattr(w, namespace), queues=queues)).json()["data"]["processes"]
        assert {names[item["id"]] for item in items} == shown, (namespace, queues)


def test_a_worker_of_another_namespace_claims_nothing_from_a_queue_of_the_same_name(send, security_world):
    w = security_world
    claim = next(e for e in ENDPOINTS if e.guard == "queue")
    rival = _issue(w.rival)
    with _nothing_written():
        response = send(claim, rival)
    assert (response.status_code, response.json()["data"]) == (200, {"claimed": False})
    mine = send(claim, _issue(w.namespace)).json()["data"]
    assert mine["task"]["id"] == step_of(w.runnable, "charge").current_activation.task_id


# ---- cursors ---------------------------------------------------------------------------------


def _page_two(send, endpoint, token, world) -> str:
    response = send(endpoint, token, path=endpoint.path(world) + "?limit=1")
    assert response.status_code == 200
    return response.json()["data"]["next_cursor"]


def _with_cursor(endpoint, world, cursor, **replace) -> dict:
    return {"path": f"{endpoint.path(world, **replace)}?limit=1&cursor={cursor}"}


def _forgeries(cursor: str) -> list[str]:
    """The cursor with its signature changed, its key changed under the old signature, re-signed elsewhere, cut."""
    value, signature = cursor.rsplit(":", 1)
    payload = cursor.split(":", 1)[0]
    decoded = json.loads(signing.b64_decode(payload.encode()))
    moved = decoded | {"k": [*decoded["k"][:-1], "0" * 32]}
    return [
        f"{value}:{signature[:-1]}{'B' if signature.endswith('A') else 'A'}",
        f"{value}:{signature[::-1]}",
        signing.b64_encode(json.dumps(moved, separators=(",", ":")).encode()).decode() + cursor[len(payload) :],
        signing.dumps(decoded, key="a key that is not the server's"),
        cursor[:-1],
    ]


@pytest.mark.parametrize("endpoint", LISTS, ids=lambda e: e.list_kind)
def test_a_forged_or_tampered_cursor_is_400_naming_the_cursor(send, security_world, endpoint):
    w = security_world
    token = _issue(w.namespace)
    cursor = _page_two(send, endpoint, token, w)
    assert send(endpoint, token, **_with_cursor(endpoint, w, cursor)).status_code == 200
    for forged in _forgeries(cursor):
        assert _error(send(endpoint, token, **_with_cursor(endpoint, w, forged)))[:3] == (
            400,
            "INVALID_ARGUMENT",
            "cursor",
        ), forged


# Where each list's cursor may be carried to: another instance, and another parent in the same instance.
MOVES = {
    "activations": [{"id": "sibling"}, {"key": "settle"}],
    "rounds": [{"id": "sibling"}, {"activation": "earlier_poll_activation"}],
    "signals": [{"id": "sibling"}],
    "signal_operations": [{"id": "sibling"}, {"signal": "other_signal"}],
    "operations": [{"id": "sibling"}],
    "events": [{"id": "sibling"}],
    "notes": [{"id": "sibling"}],
    # No parent in the path: its binding to the namespace, filters and order is proven in
    # tests/history/test_instance_query.py.
    "workflows": [],
    # Bound to the namespace: a cursor of another namespace's list is another list's.
    "signatures": [],
    "campaigns": [],
    "campaign_items": [{"campaign_id": "other_campaign"}],
}


@pytest.mark.parametrize("endpoint", LISTS, ids=lambda e: e.list_kind)
def test_a_cursor_moved_to_another_instance_or_parent_is_400_naming_the_cursor(send, security_world, endpoint):
    w = security_world
    token = _issue(w.namespace)
    cursor = _page_two(send, endpoint, token, w)
    for move in MOVES[endpoint.list_kind]:
        replace = {placeholder: w.ids[key] for placeholder, key in move.items()}
        assert _error(send(endpoint, token, **_with_cursor(endpoint, w, cursor, **replace)))[:3] == (
            400,
            "INVALID_ARGUMENT",
            "cursor",
        ), move


def test_a_cursor_of_one_list_is_refused_by_every_other_list(send, security_world):
    w = security_world
    token = _issue(w.namespace)
    cursors = {e.list_kind: _page_two(send, e, token, w) for e in LISTS}
    for endpoint in LISTS:
        for kind, cursor in cursors.items():
            if kind != endpoint.list_kind:
                assert _error(send(endpoint, token, **_with_cursor(endpoint, w, cursor)))[:3] == (
                    400,
                    "INVALID_ARGUMENT",
                    "cursor",
                ), (endpoint.list_kind, kind)


# ---- the admin -------------------------------------------------------------------------------


def _console_user(name: str, namespace, *groups: str, queues="*") -> User:
    # No password: force_login needs none, and hashing one costs more than the whole page sweep.
    user = User.objects.create_user(name, is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    models.Operator.objects.create(
        user=user, namespace=namespace, actor_id=name.ljust(32, "0")[:32], queue_access=queues
    )
    return user


@pytest.fixture
def security_users(tenancy):
    """Operators of acme (all queues, and ledger only) and of rival, acme's viewer and auditor, a superuser."""
    namespace = tenancy[0]
    rival = namespace_ensure(name="rival", application="billing", queues=["payments", "ledger"])[0]
    full = ("operators", "auditors")
    return SimpleNamespace(
        operator=_console_user("olga", namespace, *full),
        ledger_operator=_console_user("lena", namespace, *full, queues=["ledger"]),
        rival_operator=_console_user("rita", rival, *full),
        viewer=_console_user("vic", namespace, "viewers"),
        auditor=_console_user("audrey", namespace, "auditors"),
        superuser=User.objects.create_superuser("root"),
    )


@pytest.fixture
def security_console(security_world, security_users):
    """The API world plus a row of every table the admin shows that the world lacks."""
    w = security_world
    wait = activate(step_of(w.instance, "approve")).wait
    record = InboxRecordFactory(event__task=w.charge.task)
    return SimpleNamespace(
        users=security_users,
        rows={
            "history.Namespace": w.namespace.id,
            "history.Application": w.application.id,
            "history.Queue": models.Queue.objects.get(namespace=w.namespace, name="payments").id,
            "history.Credential": Credential.objects.get(key_id=_issue(w.namespace).split("_")[1]).id,
            "history.Operator": security_users.operator.pk,
            "history.WorkflowDefinition": w.definition.id,
            "history.WorkflowInstance": w.instance.id,
            "history.Gate": w.instance.pk,
            "history.Step": step_of(w.instance, "charge").id,
            "history.Activation": w.charge.id,
            "history.Task": w.charge.task_id,
            "history.Attempt": w.attempt.id,
            "history.ResultEvent": record.source_id,
            "history.InboxRecord": record.id,
            "history.PollRound": models.PollRound.objects.filter(activation=w.poll).first().id,
            "history.Wait": wait.id,
            "history.Signal": w.signal.id,
            "history.SignalOperation": w.operation.id,
            "history.WorkflowOperation": w.workflow_operation.id,
            "history.ExecutionAudit": ExecutionAuditFactory(task=w.charge.task).id,
            "history.IdempotencyReceipt": models.IdempotencyReceipt.objects.create(
                namespace=w.namespace, key="k-1", fingerprint="f" * 64, operation="continue", workflow=w.instance
            ).id,
            "history.Continuation": models.Continuation.objects.create(
                instance=w.instance, step_key="$root", kind="ADVANCE"
            ).id,
            "history.Incident": models.Incident.objects.create(
                duty="inbox",
                item_kind="inbox_record",
                item_id=record.id,
                namespace=w.namespace,
                instance=w.instance,
                error_class="ValueError",
                message="m",
            ).id,
            "history.ApprovalPolicy": models.ApprovalPolicy.objects.create(namespace=w.namespace).id,
            "history.FailureSignature": models.WorkflowInstance.objects.get(pk=w.instance.id).failure_signature_id,
            "history.Stall": models.Stall.objects.create(
                namespace=w.namespace,
                instance=w.instance,
                reason=models.StallReason.INBOX_WAITING,
                detail="an inbox record has waited for the runner",
                since=clock.now(),
                revision=w.instance.revision,
                marked_at=clock.now(),
            ).id,
            "history.Webhook": (webhook := _webhook(w.namespace)).id,
            "history.WebhookDelivery": models.WebhookDelivery.objects.create(
                webhook=webhook, event="ping", event_key="k", body="{}"
            ).id,
            "console.Case": _case(w),
            "history.Campaign": _campaign(w),
            "auth.User": security_users.operator.pk,
            "auth.Group": Group.objects.get(name="operators").pk,
        },
    )


def _webhook(namespace) -> models.Webhook:
    return models.Webhook.objects.create(
        namespace=namespace, name="pager", url="https://hooks.example/x", events=["ping"], secret="s" * 20
    )


def _campaign(world) -> str:
    """A campaign of the instance, made by an operator of every queue."""
    return _campaign_of(world.namespace, [world.instance])


def _campaign_of(namespace, instances) -> str:
    """A campaign of ``instances`` made by an actor none of the swept tokens or logins act as."""
    queues = set()
    for instance in instances:
        queues |= set(models.WorkflowDefinition.objects.get(pk=instance.definition_id).queues)
    campaign = models.Campaign.objects.create(
        namespace=namespace,
        title="declines",
        source="a selection",
        kind="retry",
        step_key="charge",
        command='{"kind": "retry", "step_key": "charge", "reason": "r", "evidence_ref": "ticket:1", "declared": true}',
        reason="r",
        actor_id="6" * 32,
        owner="olga",
        queue_access="*",
        queues=sorted(queues),
        canary_size=1,
        halt_percent=10,
        rate_per_second=1,
        total=len(instances),
    )
    models.CampaignItem.objects.bulk_create(
        models.CampaignItem(campaign=campaign, position=n, instance_id=instance.id, revision=instance.revision)
        for n, instance in enumerate(instances)
    )
    return campaign.id


def _case(world) -> int:
    case = Case.objects.create(namespace=world.namespace, title="declines", opened_by="olga")
    CaseMember.objects.create(case=case, instance_id=world.instance.id)
    return case.pk


# Rows of the namespace itself: every operator of the namespace sees them, whatever its queues.
NAMESPACE_LEVEL = {
    "history.Namespace",
    "history.Application",
    "history.Credential",
    "history.Operator",
    "history.ApprovalPolicy",
    "history.Webhook",
}
AUTH_MODELS = {"auth.User", "auth.Group"}


def _admin_urls(label: str, pk) -> tuple[str, list[str]]:
    app, model = label.lower().split(".")
    return reverse(f"admin:{app}_{model}_changelist"), [
        reverse(f"admin:{app}_{model}_{page}", args=[pk]) for page in ("change", "history")
    ]


@pytest.fixture
def statement_deadline():
    """On MariaDB a statement running for seconds fails instead of hanging the suite."""
    if connection.vendor != "mysql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION max_statement_time = 3")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION max_statement_time = 0")


def _sweep_cases() -> list:
    """(model label, users who must not see its row, a user who does) for every registered admin."""
    cases = []
    for model in admin.site._registry:
        label = model._meta.label
        if label in AUTH_MODELS:
            case = (label, ["rival_operator", "ledger_operator", "operator"], "superuser")
        elif label in NAMESPACE_LEVEL:
            case = (label, ["rival_operator"], "operator")
        else:
            case = (label, ["rival_operator", "ledger_operator"], "operator")
        cases.append(pytest.param(*case, id=label))
    return cases


def test_every_registered_model_admin_is_swept(security_console):
    assert {model._meta.label for model in admin.site._registry} == set(security_console.rows)


@pytest.mark.parametrize(("label", "refused", "control"), _sweep_cases())
def test_admin_pages_never_show_a_row_of_another_namespace_or_queue_set(
    client, security_console, statement_deadline, label, refused, control
):
    changelist, pages = _admin_urls(label, security_console.rows[label])
    for name in refused:
        client.force_login(getattr(security_console.users, name))
        listing = client.get(changelist)
        assert listing.status_code in (200, 403), (name, listing.status_code)
        assert pages[0] not in listing.content.decode(), name
        for url in pages:
            response = client.get(url)
            # Django's admin answers a row outside the queryset with a redirect to its index.
            hidden = response.status_code in (403, 404) or response.get("Location") == reverse("admin:index")
            assert hidden, (name, url, response.status_code)
    client.force_login(getattr(security_console.users, control))
    assert pages[0] in client.get(changelist).content.decode()
    assert client.get(pages[0]).status_code == 200


AUDITS = ("history.WorkflowOperation", "history.SignalOperation", "history.ExecutionAudit")


@pytest.mark.parametrize("label", AUDITS)
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_audit_exports_never_carry_a_row_of_another_namespace_or_queue_set(client, security_console, label, fmt):
    app, model = label.lower().split(".")
    export, row = reverse(f"admin:{app}_{model}_export", args=[fmt]), security_console.rows[label]
    for name in ("rival_operator", "ledger_operator", "viewer"):
        client.force_login(getattr(security_console.users, name))
        response = client.get(export)
        assert response.status_code == 403 or row not in b"".join(response.streaming_content).decode(), name
    client.force_login(security_console.users.auditor)
    assert row in b"".join(client.get(export).streaming_content).decode()


def test_a_task_of_an_instance_the_operator_cannot_open_is_hidden_even_on_an_accessible_queue(
    client, security_world, security_users
):
    w = security_world
    client.force_login(security_users.ledger_operator)
    assert client.get(reverse("admin:history_workflowinstance_change", args=[w.instance.id])).status_code == 404
    # The POLL round's query task runs on ledger, which this operator may access.
    assert client.get(reverse("admin:history_task_change", args=[w.poll.last_task_id])).status_code != 200


# ---- the instance admin's own forms ------------------------------------------------------


def _recovery_post(state, name: str) -> dict:
    """What the operator's browser posts to confirm ``name`` on the UNKNOWN-task instance."""
    spec = OPERATIONS[name]
    task, step = state.task, state.step
    data = {
        "expected_revision": str(state.instance.revision),
        **REASON,
        "declaration": "on",
        "idempotency_key": f"admin-{name}",
        "_confirm": "1",
    }
    targets = {
        "task": {"task_id": task.id, "expected_task_revision": str(task.revision)},
        "step": {
            "step_key": step.key,
            "activation_id": step.current_activation_id,
            "expected_step_revision": str(step.revision),
        },
        "instance": {},
    }
    conclusion = {"conclusion": "SUCCEEDED", "result": '{"paid":true}'} if spec.with_conclusion else {}
    return data | targets[spec.target] | conclusion


FORMS: dict[str, tuple[str, list, Callable]] = {
    **{
        f"recovery/{name}": ("recovery", [name], lambda state, name=name: _recovery_post(state, name))
        for name in OPERATIONS
    },
    **{
        f"control/{action}": (
            "control",
            [action],
            lambda state: {
                "reason": "maintenance window",
                "expected_control_revision": str(state.instance.control_revision),
            },
        )
        for action in CONTROLS
    },
    "decide": (
        "decide",
        [],
        lambda state: {
            "kind": "conclude",
            "step_key": state.step.key,
            "expected_revision": str(state.instance.revision),
            "conclusion": "SUCCEEDED",
            "result": '{"paid":true}',
            **REASON,
            "declaration": "on",
            "idempotency_key": "admin-decide",
            "_confirm": "1",
        },
    ),
    "signal": (
        "signal",
        [],
        lambda state: {
            "target_step_key": "charge",
            "name": "approved",
            "payload_version": "1",
            "payload": '{"by":"finance"}',
            "reason": "finance approved",
            "idempotency_key": "admin-signal-1",
        },
    ),
}


def _form_url(form: str, instance_id: str) -> str:
    kind, args, _ = FORMS[form]
    return reverse(f"admin:history_workflowinstance_{kind}", args=[instance_id, *args])


@pytest.fixture
def security_forms(tenancy, security_users):
    """An instance whose ReviewTask form would commit, and the console users."""
    return SimpleNamespace(state=task_unknown_state(tenancy), users=security_users)


def test_the_swept_forms_are_every_url_the_instance_admin_adds():
    model_admin = admin.site._registry[models.WorkflowInstance]
    stock = {"changelist", "add", "history", "delete", "change"}
    added = {u.name for u in model_admin.get_urls() if u.name and u.name.rsplit("_", 1)[1] not in stock}
    assert added == {f"history_workflowinstance_{kind}" for kind, _, _ in FORMS.values()} | {
        f"history_workflowinstance_{kind}" for kind in READS
    } | {f"history_workflowinstance_{kind}" for kind in POST_ONLY} | {
        "history_workflowinstance_proposal",
        "history_workflowinstance_decision",
    }


# The instance admin's added reads: whoever may view the instance, and 404 outside the operator's reach.
READS = {"status": [("rival_operator", 404), ("ledger_operator", 404), ("viewer", 200), ("auditor", 200)]}


@pytest.mark.parametrize("read", READS)
def test_reads_are_404_outside_the_operator_reach_and_answer_only_get(client, security_forms, read):
    state, users = security_forms.state, security_forms.users
    url = reverse(f"admin:history_workflowinstance_{read}", args=[state.instance.id])
    with _nothing_written():
        for name, status in READS[read]:
            client.force_login(getattr(users, name))
            assert client.get(url).status_code == status, name
        assert client.post(url).status_code == 405


# Who may not open the forms of an instance, and what the admin answers them.
FORM_REFUSALS = [("rival_operator", 404), ("ledger_operator", 404), ("viewer", 403), ("auditor", 403)]


@pytest.mark.parametrize("form", FORMS)
def test_forms_are_404_outside_the_operator_namespace_or_queues_and_403_without_the_permission(
    client, security_forms, form
):
    state, users = security_forms.state, security_forms.users
    url, post = _form_url(form, state.instance.id), FORMS[form][2](state)
    with _nothing_written():
        for name, status in FORM_REFUSALS:
            client.force_login(getattr(users, name))
            assert client.get(url).status_code == status, name
            assert client.post(url, post).status_code == status, name
    client.force_login(users.operator)
    assert client.get(url).status_code == 200


def test_a_proposal_page_is_404_outside_the_operator_reach_and_403_without_the_recover_permission(
    client, security_forms
):
    state, users = security_forms.state, security_forms.users
    models.ApprovalPolicy.objects.create(namespace=state.instance.namespace)
    proposer = Identity(state.instance.namespace_id, "6" * 32, frozenset({Scope.RECOVER}), None)
    proposal_id = (
        OPERATIONS["review-task"]
        .service(identity=proposer, instance_id=state.instance.id, idempotency_key="p", command=rq_review(state))
        .data["proposal_id"]
    )
    url = reverse("admin:history_workflowinstance_proposal", args=[state.instance.id, proposal_id])
    with _nothing_written():
        for name, status in FORM_REFUSALS:
            client.force_login(getattr(users, name))
            assert client.get(url).status_code == status, name
            assert client.post(url, {"_approve": "1", "idempotency_key": "admin-a"}).status_code == status, name
    client.force_login(users.operator)
    assert client.get(url).status_code == 200
    assert client.post(url, {"_approve": "1", "idempotency_key": "admin-a"}).status_code == 302
    assert models.Proposal.objects.get(pk=proposal_id).state == models.ProposalState.APPROVED


def test_a_decision_page_is_404_outside_the_operator_reach_and_answered_only_with_the_recover_permission(
    client, security_forms
):
    state, users = security_forms.state, security_forms.users
    models.ApprovalPolicy.objects.create(namespace=state.instance.namespace)
    maker = Identity(state.instance.namespace_id, "6" * 32, frozenset({Scope.RECOVER}), None)
    command = {
        "kind": "conclude",
        "step_key": state.step.key,
        "expected_revision": str(state.instance.revision),
        **REASON,
        "declared": True,
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
    }
    decision, _ = decision_make(identity=maker, instance_id=state.instance.id, idempotency_key="d", command=command)
    url = reverse("admin:history_workflowinstance_decision", args=[state.instance.id, decision.id])
    approve = {"_approve": "1", "idempotency_key": "admin-a"}
    with _nothing_written():
        for name, status in FORM_REFUSALS:
            client.force_login(getattr(users, name))
            assert client.get(url).status_code == (status if status == 404 else 200), name
            assert client.post(url, approve).status_code == status, name
    client.force_login(users.operator)
    assert client.post(url, approve).status_code == 302
    assert models.Decision.objects.get(pk=decision.pk).approval["outcome"] == "APPROVED"


# The instance admin's POST-only actions, which redirect back to the instance page with a message.
POST_ONLY = {
    "attention": {
        "acknowledge": lambda state: {},
        "assign": lambda state: {"assignee": ""},
        "note": lambda state: {"text": "checked with the provider", "idempotency_key": "admin-note-1"},
    }
}


@pytest.mark.parametrize(("kind", "action"), [(k, a) for k, actions in POST_ONLY.items() for a in actions])
def test_post_only_actions_are_404_outside_the_operator_reach_403_without_the_permission_or_csrf_token(
    client, security_forms, kind, action
):
    state, users = security_forms.state, security_forms.users
    url = reverse(f"admin:history_workflowinstance_{kind}", args=[state.instance.id, action])
    post = POST_ONLY[kind][action](state)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(users.operator)
    with _nothing_written():
        for name, status in FORM_REFUSALS:
            client.force_login(getattr(users, name))
            assert client.post(url, post).status_code == status, name
        client.force_login(users.operator)
        assert client.get(url).status_code == 405
        assert browser.post(url, post).status_code == 403
    assert client.post(url, post).status_code == 302


def _bulk_post(state, action: str) -> dict:
    return {
        "action": action,
        "_selected_action": [state.instance.id],
        "apply": "1",
        "bulk_key": f"admin-{action}",
        f"revision_{state.instance.id}": str(state.instance.revision),
        # Posted as eligible, so an allowed operator's submit reaches the service and its checks.
        f"eligible_{state.instance.id}": "1",
        **REASON,
        "declaration": "on",
    }


@pytest.mark.parametrize(
    "action",
    [
        a
        for a in admin.site._registry[models.WorkflowInstance].actions
        if a not in ("case_from_selection", "campaign_from_selection")
    ],
)
def test_bulk_actions_never_reach_an_instance_outside_the_operator_reach_or_permission(client, security_forms, action):
    state, users = security_forms.state, security_forms.users
    changelist = reverse("admin:history_workflowinstance_changelist")
    with _nothing_written():
        for name, _ in FORM_REFUSALS:
            client.force_login(getattr(users, name))
            html = client.post(changelist, _bulk_post(state, action), follow=True).content.decode()
            assert 'class="ok"' not in html and 'class="refused"' not in html, name
    client.force_login(users.operator)
    assert 'class="refused"' in client.post(changelist, _bulk_post(state, action)).content.decode()


def test_a_case_is_never_opened_with_an_instance_outside_the_operator_reach_or_permission(client, security_forms):
    state, users = security_forms.state, security_forms.users
    changelist = reverse("admin:history_workflowinstance_changelist")
    post = {"action": "case_from_selection", "_selected_action": [state.instance.id]}
    for name, _ in FORM_REFUSALS:
        client.force_login(getattr(users, name))
        client.post(changelist, post, follow=True)
        assert not Case.objects.exists(), name
    client.force_login(users.operator)
    assert client.post(changelist, post).status_code == 302
    assert list(Case.objects.get().members.values_list("instance_id", flat=True)) == [state.instance.id]


def test_a_campaign_is_never_made_with_an_instance_outside_the_operator_reach_or_permission(client, security_forms):
    state, users = security_forms.state, security_forms.users
    changelist = reverse("admin:history_workflowinstance_changelist")
    post = {
        "action": "campaign_from_selection",
        "_selected_action": [state.instance.id],
        "make": "1",
        "title": "t",
        "kind": "retry",
        "step_key": "charge",
        "reason": "r",
        "evidence_ref": "ticket:1",
        "declared": "on",
        "canary_size": "1",
        "halt_percent": "10",
        "rate_per_second": "1",
    }
    for name, _ in FORM_REFUSALS:
        client.force_login(getattr(users, name))
        client.post(changelist, post, follow=True)
        assert not models.Campaign.objects.exists(), name
    client.force_login(users.operator)
    assert client.post(changelist, post).status_code == 302
    assert list(models.CampaignItem.objects.values_list("instance_id", flat=True)) == [state.instance.id]


def _csrf_cases() -> list:
    changelist = reverse("admin:history_workflowinstance_changelist")
    actions = admin.site._registry[models.WorkflowInstance].actions
    return [
        *[
            pytest.param(lambda s, form=form: (_form_url(form, s.instance.id), FORMS[form][2](s)), id=form)
            for form in FORMS
        ],
        *[pytest.param(lambda s, a=action: (changelist, _bulk_post(s, a)), id=f"bulk/{action}") for action in actions],
    ]


@pytest.mark.parametrize("request_of", _csrf_cases())
def test_an_admin_post_without_the_csrf_token_is_403_and_writes_nothing(security_forms, request_of):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(security_forms.users.operator)
    url, post = request_of(security_forms.state)
    assert browser.get(url).status_code == 200
    with _nothing_written():
        assert browser.post(url, post).status_code == 403
    assert browser.post(url, post | {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value}).status_code != 403


# ---- secrets at rest and in the logs -----------------------------------------------------


def _bootstrap(*args: str) -> dict:
    out = StringIO()
    call_command("weave_bootstrap", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def _secrets_in_use(api, client, tenancy) -> tuple[list[str], list[str]]:
    """Issue tokens (service and command), use them, fail with them, run a recovery by API and admin.

    Returns (every secret string handed out or presented, the SHA-256 digests stored for the tokens).
    """
    state = task_unknown_state(tenancy)
    issued = credential_issue(
        namespace_id=tenancy[0].id,
        application_id=tenancy[1].id,
        actor_id="5" * 32,
        label="sweep",
        scopes=ALL_SCOPES,
        queue_access="*",
    ).token
    booted = _bootstrap("--namespace", "acme", "--actor", "ops", "--recover-access", "--admin-user", "boot")
    revoked = _issue(tenancy[0])
    Credential.objects.filter(key_id=revoked.split("_")[1]).update(revoked_at=clock.now())
    wrong_secret = issued[:-4] + ("AAAA" if not issued.endswith("AAAA") else "BBBB")
    for token, status in ((issued, 200), (booted["token"], 200), (revoked, 401), (wrong_secret, 401)):
        assert api.get("/v1/credentials/self", **bearer(token)).status_code == status
    assert api.get("/v1/credentials/self", HTTP_AUTHORIZATION=f"Bearer {issued} {issued}").status_code == 401
    review = api.post(
        f"/v1/workflows/{state.instance.id}/recovery/review-task",
        data=exactjson.dumps(rq.review(state)),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="sweep-review",
        **bearer(booted["token"]),
    )
    assert review.status_code == 200, review.content
    assert client.login(username="boot", password=booted["admin_password"])
    continued = client.post(
        reverse("admin:history_workflowinstance_recovery", args=[state.instance.id, "continue"]),
        _recovery_post(state.fresh(), "continue"),
    )
    assert continued.status_code == 200 and 'id="refusal"' in continued.content.decode()
    tokens = [issued, booted["token"], revoked]
    presented = [*tokens, wrong_secret, booted["admin_password"]]
    return presented + [t.split("_", 2)[2] for t in tokens], [hashlib.sha256(t.encode()).hexdigest() for t in tokens]


def _every_row() -> str:
    """Every row of every table of the database, as text."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            rows.append(f"{table}: {cursor.fetchall()!r}")
    return "\n".join(rows)


def test_no_table_holds_a_token_its_secret_or_an_admin_password(api, client, tenancy):
    secrets_, digests = _secrets_in_use(api, client, tenancy)
    stored = _every_row()
    assert all(digest in stored for digest in digests)
    leaked = [secret for secret in secrets_ if secret in stored]
    assert leaked == []


def test_no_token_secret_or_password_reaches_any_log(api, client, tenancy, caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("django.request", "django.db.backends"):
        caplog.set_level(logging.DEBUG, logger=name)
    # Capturing queries logs every SQL statement with its parameters, as DEBUG=True would.
    with CaptureQueriesContext(connection):
        secrets_, digests = _secrets_in_use(api, client, tenancy)
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''} {getattr(r, 'sql', '')} {getattr(r, 'params', '')}"
        for r in caplog.records
    )
    assert any(r.name == "django.request" and r.status_code == 401 for r in caplog.records)
    assert all(digest in logged for digest in digests)
    leaked = [secret for secret in secrets_ if secret in logged]
    assert leaked == []
