"""The served OpenAPI description against the API over real HTTP: schemathesis's own engine (what ``st run`` runs)
reads /v1/openapi.json from a live server and runs every operation through its phases (examples, coverage: the
boundary and negative values of every constraint, fuzzing: positive and negative data, stateful: the links between
operations), with every check it has, and fails on any failure it reports.

The server is pytest-django's live server (a threaded HTTP server in this process, on this test's committed rows),
so both database lanes run it. Every other valid request is sent with the ids of real rows (a POLL step in review,
a SIGNAL step in review and its signal audit) in its path and body, so requests reach real state and not only 404s.

Beyond schemathesis's checks, a request the description calls valid is never refused as malformed: INVALID_ARGUMENT
is allowed only where the rule reads rows or secrets no schema can state (SEMANTIC below). The instance's or a row's
state answers NOT_FOUND, ABORTED, ALREADY_EXISTS or FAILED_PRECONDITION, never INVALID_ARGUMENT.
"""

import itertools
import json
import socket
import uuid

import pytest
import schemathesis
from schemathesis.config import HealthCheck
from schemathesis.engine import Status, events, from_schema
from schemathesis.generation import GenerationMode
from schemathesis.hooks import GLOBAL_HOOK_DISPATCHER
from schemathesis.openapi.checks import EnsureResourceAvailability

from history.models import Attempt, Scope, SignalOperation
from testkit import states

# The live server reads what the test commits: its test is transactional (live_server makes it so).
pytestmark = pytest.mark.django_db

# Valid data refused as INVALID_ARGUMENT only for these fields of these operations: each rule reads rows or secrets
# no schema can hold. Every list's cursor is signed by the server and bound to its list: a well-formed cursor may be
# no cursor of this list (CURSOR, wherever a cursor is taken).
CURSOR = "cursor"
SEMANTIC = {
    # The target must be a SIGNAL step (or a POLL step with a final signal) of the instance's fixed definition, and
    # without one exactly one such step must await the name.
    "signal_workflow": {"target_step_key"},
    # A SUCCEEDED result satisfies the step's fixed result contract (a TIMER's is null, a POLL's classifies
    # SUCCEEDED under its fixed mapping): the step and its definition decide.
    "recovery_resolve_step": {"result"},
    # Rounds exist only for a POLL activation: the step's kind is its definition's.
    "list_workflow_poll_rounds": {"activation"},
}
# Examples per operation and generation mode (fuzzing), steps per stateful scenario: the run stays near a minute.
MAX_EXAMPLES, STATEFUL_STEPS = 5, 6


@schemathesis.check
def no_malformed_refusal_of_valid_data(ctx, response, case):
    """Data the description calls valid is never INVALID_ARGUMENT, but for the rules no schema can state."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    error, operation = json.loads(response.content)["error"], case.operation
    exempt = SEMANTIC.get(operation.definition.raw["operationId"], set())
    if any(parameter.name == CURSOR for parameter in operation.query):
        exempt = exempt | {CURSOR}
    if error["code"] == "INVALID_ARGUMENT" and error.get("field") not in exempt:
        raise AssertionError(f"valid data refused as malformed: {error}")
    return None


@pytest.fixture
def real_rows(tenancy):
    """Path and body values of real rows: a POLL step in review (its instance, step, activation and task), and for
    the signal paths a SIGNAL step in review with its signal and that signal's audit record."""
    poll = states.poll_pending_reviewed_state(tenancy)
    signal = states.signal_contract_violation_state(tenancy)
    accepted = signal.signals[0]
    return {
        "poll": {
            "id": poll.instance.id,
            "instance_id": poll.instance.id,
            "key": poll.step.key,
            "step_key": poll.step.key,
            "activation": poll.activation.id,
            "activation_id": poll.activation.id,
            "task": poll.task.id,
            "task_id": poll.task.id,
            "attempt_id": Attempt.objects.filter(task=poll.task).order_by("number").last().id,
            "queue": states.QUEUE,
        },
        "signal": {
            "id": signal.instance.id,
            "signal": accepted.id,
            "operation": SignalOperation.objects.get(signal_id=accepted.id).id,
            "target_step_key": signal.step.key,
        },
        "definition": {"definition": poll.definition.name, "version": poll.definition.version},
    }


def about_a_body_reference(context, failure, case, response) -> bool:
    """filter_failure: a "created resource not found" whose 404 names a field of the request body is about that
    reference (``corrects``: no such note of this workflow), not about the resource the link created."""
    if not isinstance(failure, EnsureResourceAvailability):
        return True
    field = json.loads(response.content)["error"].get("field")
    return not (isinstance(case.body, dict) and field in case.body)


def _is_positive(case) -> bool:
    return case.meta is None or case.meta.generation.mode.is_positive


def _request_shaper(rows: dict):
    """before_call: every other valid request names real rows; a valid start names a real definition; each valid
    keyed command has its own Idempotency-Key (a replayed key with another command is only ALREADY_EXISTS)."""
    real = itertools.cycle([True, False])

    def before_call(context, case, kwargs):
        if not _is_positive(case):
            return
        if case.operation.label == "POST /v1/workflows" and isinstance(case.body, dict):
            case.body |= rows["definition"]
        if case.headers and "Idempotency-Key" in case.headers:
            case.headers["Idempotency-Key"] = f"walk-{uuid.uuid4().hex}"
        if not next(real):
            return
        # One instance's rows only make sense together: every id of the request is replaced, or none.
        ids = rows["signal" if "/signals" in case.operation.path else "poll"]
        if case.path_parameters:
            case.path_parameters = {name: ids.get(name, value) for name, value in case.path_parameters.items()}
        if isinstance(case.body, dict):
            case.body = {name: ids.get(name, value) for name, value in case.body.items()}

    return before_call


def _configured(url: str, token: str):
    schema = schemathesis.openapi.from_url(f"{url}/v1/openapi.json")
    # The bearer token holds every scope; the security scheme is neither generated nor negated. Each connection
    # ends with its answer, so no server thread outlives the test's database (shared with it on SQLite).
    schema.config.update(
        base_url=url,
        headers={"Authorization": f"Bearer {token}", "Connection": "close"},
        request_timeout=30,
        suppress_health_check=list(HealthCheck),
    )
    schema.hook("filter_failure")(about_a_body_reference)
    schema.config.phases.update(phases=["examples", "coverage", "fuzzing", "stateful"])
    schema.config.generation.update(
        modes=list(GenerationMode),
        max_examples=MAX_EXAMPLES,
        deterministic=True,
        database="none",
        with_security_parameters=False,
    )
    schema.config.phases.stateful.max_steps = STATEFUL_STEPS
    # Coverage also repeats each query parameter (refused, naming it); unexpected methods: the three write verbs.
    schema.config.phases.coverage.generate_duplicate_query_parameters = True
    schema.config.phases.coverage.unexpected_methods = {"PUT", "PATCH", "DELETE"}
    # 400 is a valid answer to valid data only when no_malformed_refusal_of_valid_data agrees (FAILED_PRECONDITION).
    schema.config.checks.positive_data_acceptance.expected_statuses = ["2xx", "400", "401", "403", "404", "409", "429"]
    return schema


def _run(schema) -> tuple[set[str], set[str], list[str]]:
    """Every phase, every check: the phases and operations tested, and each failure or error as text."""
    phases, tested, problems = set(), set(), []
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            phases.add(str(event.phase))
            tested.add(event.recorder.label)
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        problems.append(
                            f"{event.recorder.label} [{check.name}] {failure.title}: {failure.message}\n"
                            f"    {check.failure_info.code_sample}"
                        )
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            problems.append(f"error: {getattr(event, 'label', '')} {getattr(event, 'info', event)!r}")
        elif isinstance(event, events.EngineFinished):
            assert event.stop_reason == "completed", event.stop_reason
    return phases, tested, problems


def test_every_operation_over_http_answers_as_described(live_server, real_rows, issue_token):
    # The live server writes headers and body apart: without TCP_NODELAY each answer waits for a delayed ACK.
    live_server.thread.httpd.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    schema = _configured(live_server.url, issue_token(scopes=[s.value for s in Scope]).token)
    hook = GLOBAL_HOOK_DISPATCHER.register_hook_with_name(_request_shaper(real_rows), "before_call")
    try:
        phases, tested, problems = _run(schema)
    finally:
        GLOBAL_HOOK_DISPATCHER.unregister(hook)
    assert problems == [], "\n\n".join(dict.fromkeys(problems))
    described = {f"{method.upper()} {path}" for path, item in schema.raw_schema["paths"].items() for method in item}
    assert described <= tested, sorted(described - tested)
    assert {"coverage", "fuzzing", "stateful"} <= phases, phases


# The error envelope, and the one of GET /readyz's 503, whose error also lists the readiness checks.
ERROR_ENVELOPES = [{"$ref": f"#/components/schemas/{name}"} for name in ("ErrorEnvelope", "NotReadyEnvelope")]


def _describes_its_answers(method: str, operation: dict) -> bool:
    """One JSON success (a recovery command also its 202 proposal), 401 wherever the operation takes a token (all
    but the public ones, which state no security), 400 wherever a parameter or body can be malformed, every error in
    the error envelope, and a JSON request body on every POST."""
    responses = operation["responses"]
    successes = [status for status in responses if status.startswith("2")]
    malformable = method == "post" or bool(operation.get("parameters"))
    errors_enveloped = all(
        responses[status]["content"]["application/json"]["schema"] in ERROR_ENVELOPES
        for status in responses
        if not status.startswith("2")
    )
    body = operation.get("requestBody", {}).get("content", {})
    return (
        len(successes) == (2 if operation.get("operationId", "").startswith("recovery_") else 1)
        and all("content" in responses[status] for status in successes)
        and ("401" in responses or "security" not in operation)
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
