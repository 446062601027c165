"""Races with real threads on MariaDB: one effect per key, one winner per revision, operations
against the runner, the workers and pause/resume, and no deadlock or lock timeout reaching a client."""

import datetime as dt
import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

import pytest
from django.db import connection
from rest_framework.test import APIClient

from core import clock, exactjson
from core.db.base import pin_node
from core.errors import WeaveError
from engine.check import invariants_check
from engine.handlers import claim_execute
from engine.instances import instance_pause, instance_resume
from engine.runner import runner_pass
from engine.signaling import signal_accept
from history.credentials import identity_of_credential
from history.locking import RetryStats
from history.models import (
    Activation,
    Application,
    ApprovalPolicy,
    Attempt,
    ExecutionAudit,
    IdempotencyReceipt,
    InboxRecord,
    InboxState,
    InstanceState,
    PollRound,
    Proposal,
    ProposalState,
    Queue,
    ResultEvent,
    Scope,
    Step,
    Task,
    TaskState,
    Wait,
    WorkflowInstance,
    WorkflowOperation,
)
from history.tenancy import namespace_ensure
from recovery.operations import OPERATIONS
from recovery.proposals import proposal_approve, proposal_reject
from testkit import requests as rq
from testkit import states
from testkit.driver import Engine, poll_step, task_step
from tests.conftest import bearer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="SQLite serialises writers at BEGIN: no row locks to race"),
]
CLIENTS = 32
KEYS = 16
CASES = rq.cases()
CASE_IDS = [case[0] for case in CASES]
API_NAME = {op.service: name for name, op in OPERATIONS.items()}
# The first case of each operation, where racing every state again would cost more than it proves.
OPERATION_CASES = list({API_NAME[case[1]]: case for case in reversed(CASES)}.values())[::-1]
OPERATION_IDS = [API_NAME[case[1]] for case in OPERATION_CASES]
SAME_KEY = [
    pytest.param(transport, *case, id=f"{name}-{transport}")
    for transport in ("service", "api")
    for name, case in zip(OPERATION_IDS, OPERATION_CASES, strict=True)
]
TALLY: Counter = Counter()  # commands sent and who won, for the summary line


@pytest.fixture(scope="module", autouse=True)
def _quiet_request_log():
    """The races answer hundreds of expected 409s: keep the output readable."""
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.ERROR)
    yield
    request_log.setLevel(level)


@pytest.fixture(autouse=True)
def _counted(reliability_report):
    """Each test's commands, winners and the deadlocks the bounded retry absorbed, for the run's summary."""
    before, retried = Counter(TALLY), RetryStats.deadlocks_retried
    yield
    sent = TALLY - before
    reliability_report(
        "races",
        {"operations": sent.pop("commands", 0), "deadlocks retried": RetryStats.deadlocks_retried - retried}
        | dict(sorted(sent.items())),
    )


@dataclass(frozen=True)
class Outcome:
    """What one client saw: the status, the exact receipt data text (success) or the error code."""

    status: int
    data: str | None = None
    replayed: bool = False
    code: str | None = None


def _concurrently(work, count: int) -> list:
    """Run ``work(i)`` in ``count`` threads released together; each result or raised error, in order."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(i: int) -> None:
        try:
            with pin_node(i):  # on a cluster, the clients are spread over its nodes
                barrier.wait()
                results[i] = work(i)
        except Exception as exc:  # collected and asserted by the test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def _by_service(service, identity, instance_id: str, command: dict, key: str) -> Outcome:
    TALLY["commands"] += 1
    try:
        receipt = service(identity=identity, instance_id=instance_id, idempotency_key=key, command=command)
    except WeaveError as error:
        return Outcome(error.status, code=error.code)
    return Outcome(receipt.status, receipt.text, receipt.replayed)


def _by_api(service, token: str, instance_id: str, command: dict, key: str) -> Outcome:
    TALLY["commands"] += 1
    response = APIClient().post(
        f"/v1/workflows/{instance_id}/recovery/{API_NAME[service]}",
        data=exactjson.dumps(command),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **bearer(token),
    )
    body = response.content.decode()
    if "error" in json.loads(body):
        return Outcome(response.status_code, code=json.loads(body)["error"]["code"])
    data = body[body.index(',"data":') + len(',"data":') : -1]  # the envelope's data member, as sent
    return Outcome(response.status_code, data, response.get("Idempotent-Replayed") == "true")


def _clients(issue_token, transport: str, count: int) -> list:
    """``count`` distinct credentials holding workflows:recover: identities, or bearer tokens for the API."""
    tokens = [issue_token(scopes=[Scope.RECOVER], actor_id=f"{i:032x}") for i in range(count)]
    if transport == "api":
        return [token.token for token in tokens]
    return [identity_of_credential(token.credential) for token in tokens]


def _send(transport: str):
    return _by_api if transport == "api" else _by_service


def _assert_only_outcomes(results: list) -> list[Outcome]:
    """No client saw an exception (a deadlock or lock timeout would be one) nor a 5xx answer."""
    assert all(isinstance(r, Outcome) for r in results), [r for r in results if not isinstance(r, Outcome)]
    assert all(r.status < 500 for r in results), results
    return results


@pytest.mark.parametrize(("transport", "name", "service", "build", "make"), SAME_KEY)
def test_one_key_from_32_clients_makes_one_effect_and_32_byte_identical_receipts(
    tenancy, issue_token, transport, name, service, build, make
):
    state = make(tenancy)
    command = build(state)
    revision = state.instance.revision
    clients, send = _clients(issue_token, transport, CLIENTS), _send(transport)
    outcomes = _assert_only_outcomes(
        _concurrently(lambda i: send(service, clients[i], state.instance.id, command, "same"), CLIENTS)
    )
    assert {(o.status, o.code) for o in outcomes} == {(200, None)}
    assert len({o.data for o in outcomes}) == 1
    assert sorted(o.replayed for o in outcomes) == [False] + [True] * (CLIENTS - 1)
    assert state.operations().count() == 1
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == revision + 1
    assert IdempotencyReceipt.objects.filter(key="same").count() == 1
    states.assert_invariants(state)


# The first commit moves the revision every other key read (ABORTED), except where a check made before
# the revision check already refuses: ReviewTask leaves its REVIEWED record unconsumed in the inbox, and Continue
# takes the instance out of NEEDS_REVIEW (both FAILED_PRECONDITION).
REFUSAL = {"review-task": "FAILED_PRECONDITION", "continue": "FAILED_PRECONDITION"}


@pytest.mark.parametrize(("name", "service", "build", "make"), CASES, ids=CASE_IDS)
def test_16_keys_on_one_revision_make_exactly_one_success_and_one_audit(
    tenancy, issue_token, name, service, build, make
):
    state = make(tenancy)
    command = build(state)
    revision = state.instance.revision
    clients = _clients(issue_token, "service", KEYS)
    outcomes = _assert_only_outcomes(
        _concurrently(lambda i: _by_service(service, clients[i], state.instance.id, command, f"key-{i}"), KEYS)
    )
    refusal = REFUSAL.get(API_NAME[service], "ABORTED")
    assert sorted((o.code or "", o.status) for o in outcomes) == [("", 200)] + [
        (refusal, 409 if refusal == "ABORTED" else 400)
    ] * (KEYS - 1)
    assert state.operations().count() == 1
    assert state.receipts().count() == 1
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == revision + 1
    states.assert_invariants(state)


def _proposed(tenancy, issue_token, make, service, build):
    """A state and the proposal its command became under an every-operation policy, by a proposer who is
    none of the ``_clients``."""
    state = make(tenancy)
    ApprovalPolicy.objects.create(namespace=tenancy[0], approvals_required=1)
    proposer = identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id="f" * 32).credential)
    receipt = service(identity=proposer, instance_id=state.instance.id, idempotency_key="p", command=build(state))
    assert receipt.status == 202
    return state, receipt.data["proposal_id"]


def _decide(decision, identity, state, proposal_id: str, key: str, command: dict) -> Outcome:
    TALLY["commands"] += 1
    try:
        receipt = decision(
            identity=identity,
            instance_id=state.instance.id,
            proposal_id=proposal_id,
            idempotency_key=key,
            command=command,
        )
    except WeaveError as error:
        return Outcome(error.status, code=error.code)
    return Outcome(receipt.status, receipt.text, receipt.replayed)


@pytest.mark.parametrize(("name", "service", "build", "make"), OPERATION_CASES, ids=OPERATION_IDS)
def test_16_concurrent_approvals_of_one_proposal_make_exactly_one_effect(
    tenancy, issue_token, name, service, build, make
):
    state, proposal_id = _proposed(tenancy, issue_token, make, service, build)
    revision = state.instance.revision
    clients = _clients(issue_token, "service", KEYS)
    outcomes = _assert_only_outcomes(
        _concurrently(lambda i: _decide(proposal_approve, clients[i], state, proposal_id, f"approve-{i}", {}), KEYS)
    )
    assert sorted((o.code or "", o.status) for o in outcomes) == [("", 200)] + [("FAILED_PRECONDITION", 400)] * (
        KEYS - 1
    )
    effects = state.operations().exclude(action__startswith="workflow.proposal")
    assert [e.action for e in effects] == [OPERATIONS[API_NAME[service]].action]
    assert state.operations().filter(action="workflow.proposal_approved").count() == 1
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == revision + 1
    assert Proposal.objects.get(pk=proposal_id).state == ProposalState.APPROVED
    states.assert_invariants(state)


def test_approvals_racing_rejections_close_the_proposal_once(tenancy, issue_token):
    name, service, build, make = OPERATION_CASES[0]
    state, proposal_id = _proposed(tenancy, issue_token, make, service, build)
    clients = _clients(issue_token, "service", KEYS)
    decisions = [(proposal_approve, {}), (proposal_reject, {"reason": "not this way"})]
    outcomes = _assert_only_outcomes(
        _concurrently(
            lambda i: _decide(decisions[i % 2][0], clients[i], state, proposal_id, f"decide-{i}", decisions[i % 2][1]),
            KEYS,
        )
    )
    assert [o.status for o in outcomes].count(200) == 1
    closed = Proposal.objects.get(pk=proposal_id)
    effects = state.operations().exclude(action__startswith="workflow.proposal")
    assert effects.count() == (1 if closed.state == ProposalState.APPROVED else 0)
    assert (
        state.operations().filter(action__in=["workflow.proposal_approved", "workflow.proposal_rejected"]).count() == 1
    )
    states.assert_invariants(state)


def _recovery_rows(instance: WorkflowInstance) -> list:
    """Every row a recovery operation writes besides the instance, its gate and the workflow audit."""
    tasks = list(Task.objects.filter(source_instance_id=instance.id).values_list("id", flat=True))
    querysets = [
        Step.objects.filter(instance_id=instance.id),
        Activation.objects.filter(instance_id=instance.id),
        Wait.objects.filter(instance_id=instance.id),
        PollRound.objects.filter(instance_id=instance.id),
        InboxRecord.objects.filter(instance_id=instance.id),
        IdempotencyReceipt.objects.filter(workflow_id=instance.id),
        Task.objects.filter(id__in=tasks),
        Attempt.objects.filter(task_id__in=tasks),
        ResultEvent.objects.filter(task_id__in=tasks),
        ExecutionAudit.objects.filter(task_id__in=tasks),
        Application.objects.filter(namespace_id=instance.namespace_id),  # quota counters
        Queue.objects.filter(namespace_id=instance.namespace_id),
    ]
    return [sorted(queryset.values_list(), key=repr) for queryset in querysets]


CONTROLS = {"pause": (instance_pause, "workflow.pause"), "resume": (instance_resume, "workflow.resume")}


# Pause and resume carry only expected_control_revision, a recovery operation only
# expected_revision, and each bumps both: whichever commits first makes the other's revision stale.
@pytest.mark.parametrize("control", sorted(CONTROLS))
@pytest.mark.parametrize(("name", "service", "build", "make"), OPERATION_CASES, ids=OPERATION_IDS)
def test_pause_or_resume_racing_a_recovery_operation_lets_exactly_one_win(
    tenancy, issue_token, control, name, service, build, make
):
    state = make(tenancy, paused=control == "resume")
    command = build(state)
    recoverer, controller = (
        identity_of_credential(issue_token(scopes=[scope], actor_id=f"{n:032x}").credential)
        for n, scope in enumerate((Scope.RECOVER, Scope.CONTROL))
    )
    control_service, control_action = CONTROLS[control]
    before = WorkflowInstance.objects.get(pk=state.instance.pk)
    untouched = _recovery_rows(before)
    control_command = {"expected_control_revision": str(before.control_revision), "reason": "maintenance window"}

    def controls() -> Outcome:
        TALLY["commands"] += 1
        try:
            control_service(identity=controller, instance_id=before.id, command=control_command)
        except WeaveError as error:
            return Outcome(error.status, code=error.code)
        return Outcome(200)

    racers = (lambda: _by_service(service, recoverer, before.id, command, "op"), controls)
    recovered, controlled = _assert_only_outcomes(_concurrently(lambda i: racers[i](), 2))
    assert sorted([recovered.code or "", controlled.code or ""]) == ["", "ABORTED"]
    after = WorkflowInstance.objects.get(pk=before.pk)
    assert (after.revision, after.control_revision) == (before.revision + 1, before.control_revision + 1)
    actions = list(state.operations().values_list("action", flat=True))
    if recovered.code is None:
        TALLY["operation won"] += 1
        assert actions == [OPERATIONS[API_NAME[service]].action] and after.paused == before.paused
    else:
        TALLY[f"{control} won"] += 1
        assert actions == [control_action] and after.paused != before.paused
        assert _recovery_rows(before) == untouched
    states.assert_invariants(state)


# ---- an operation racing the runner and the workers on the same instance ----------------------

LEASE_EXPIRY = dt.timedelta(seconds=6)


@pytest.fixture
def engine(db):
    namespace, application, queues = namespace_ensure(name="acme", application="billing", queues=["payments", "polls"])
    yield Engine(namespace, application, queues)
    clock.set_offset(dt.timedelta(0))


def _recover(engine, api_name: str, view, build, **options) -> None:
    """Commit one recovery operation on the current state and let the runner consume what it wrote."""
    OPERATIONS[api_name].service(
        identity=engine.identity, instance_id=view.instance.id, idempotency_key=f"prep-{api_name}", command=build(view)
    )
    engine.settle()


def _hung_task(engine, view) -> None:
    """The step's task is claimed with a short lease that expires: UNKNOWN, step and instance in review."""
    view.task = Task.objects.get(pk=engine.claim("payments", lease_seconds=5).task.id)
    clock.advance(LEASE_EXPIRY)
    engine.settle()


def _reviewed_task(engine, view) -> None:
    _hung_task(engine, view)
    _recover(engine, "review-task", view, rq.review)


def _resolved_task(engine, view) -> None:
    _reviewed_task(engine, view)
    _recover(engine, "resolve-step", view, rq.resolve)


def _failed_task(engine, view) -> None:
    engine.work("payments")  # demo.fail without "retryable": a terminal FAILED
    engine.settle()


def _reviewed_pending_round(engine, view) -> None:
    """Round 1 answers PENDING; round 2's query lease expires; ReviewTask says it answered PENDING too."""
    engine.work("polls")
    engine.settle()
    clock.advance(dt.timedelta(seconds=61))
    engine.settle()
    view.task = Task.objects.get(pk=engine.claim("polls", lease_seconds=5).task.id)
    clock.advance(LEASE_EXPIRY)
    engine.settle()
    _recover(engine, "review-task", view, partial(rq.review, result={"status": "pending"}))


def _contract_violation(engine, view) -> None:
    command = {"name": "ok", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"}
    signal_accept(identity=engine.identity, instance_id=view.instance.id, command=command, idempotency_key="sig")
    engine.settle()


SIGNAL_STEP = {
    "key": "x",
    "kind": "SIGNAL",
    "name": "ok",
    "payload_version": "1",
    "deadline_seconds": 3600,
    "contract": {"type": "object", "required": ["approved"]},
}
# Each operation: the reviewed step, the instance input, how the engine brings it to the state, the command.
ENGINE_RACES = {
    "review-task": (task_step("x", handler="demo.hang"), {}, _hung_task, rq.review),
    "resolve-step": (task_step("x", handler="demo.hang"), {}, _reviewed_task, rq.resolve),
    "continue": (task_step("x", handler="demo.hang"), {}, _resolved_task, rq.continue_),
    "retry-step": (task_step("x", handler="demo.fail", max_attempts=3), {}, _failed_task, rq.retry),
    "continue-poll": (poll_step(key="x"), {"pending_rounds": 5}, _reviewed_pending_round, rq.continue_poll),
    "rearm-wait": (SIGNAL_STEP, {}, _contract_violation, rq.rearm),
}


@pytest.mark.parametrize("operation", ENGINE_RACES)
def test_an_operation_racing_the_runner_and_a_worker_commits_whole_or_not_at_all(engine, operation):
    step, input_value, bring, build = ENGINE_RACES[operation]
    # A sibling branch's task is claimed before the step goes to review: its completion and the
    # runner's consumption of it move the instance while the operator's command is on its way.
    sibling = task_step("side", queue="payments" if step.get("queue") == "polls" else "polls")
    instance = engine.start(engine.define([step, sibling]), input_value)
    engine.settle()
    in_flight = engine.claim(sibling["queue"], lease_seconds=3600)
    view = SimpleNamespace(instance=instance, step=Step.objects.get(instance=instance, key="x"), task=None)
    bring(engine, view)
    assert engine.reload(instance).state == InstanceState.NEEDS_REVIEW
    command = build(view)
    audits = WorkflowOperation.objects.filter(workflow=instance, action=OPERATIONS[operation].action)
    audits_before = audits.count()
    done = threading.Event()

    def operator() -> Outcome:
        try:
            return _by_service(OPERATIONS[operation].service, engine.identity, instance.id, command, "raced")
        finally:
            done.set()

    def worker() -> None:
        claim_execute(identity=engine.identity, claim=in_flight)
        while not done.is_set():
            engine.work("payments") or engine.work("polls")

    def runner() -> None:
        while not done.is_set():
            runner_pass()

    outcome, *engine_errors = _concurrently(lambda i: (operator, worker, runner)[i](), 3)
    assert engine_errors == [None, None]
    (outcome,) = _assert_only_outcomes([outcome])
    engine.settle()
    receipt = IdempotencyReceipt.objects.filter(key="raced").first()
    if outcome.code is None:
        TALLY["committed beside the engine"] += 1
        assert audits.count() == audits_before + 1 and receipt.response == outcome.data
        assert json.loads(outcome.data)["operation_id"] == audits.latest("created_at").operation_id
    else:
        TALLY["refused beside the engine"] += 1
        assert outcome.code in {"ABORTED", "FAILED_PRECONDITION"}, outcome
        assert audits.count() == audits_before and receipt is None
    assert Task.objects.get(pk=in_flight.task.id).state == TaskState.SUCCEEDED
    assert not InboxRecord.objects.filter(instance=instance, state=InboxState.PENDING).exists()
    assert [str(v) for v in invariants_check()] == []
