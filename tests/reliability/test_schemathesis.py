"""The served OpenAPI description against the running API: schemathesis generates requests for every operation
of /v1/openapi.json, valid and invalid, runs every check and follows the links between operations.

Requests go through the WSGI application in process (same database connection as the test), with a bearer
token holding every scope; half the cases have their path ids replaced by a real instance's, so reads reach
real rows and not only 404s. Three phases run per operation (examples, coverage: the boundary and negative
values of every constraint, fuzzing: positive and negative data), then a stateful run walks the links.

Beyond schemathesis's own checks, a request the description calls valid is never refused as malformed:
INVALID_ARGUMENT is allowed only for the rules a schema cannot state (SEMANTIC below).
"""

import itertools
import json
import uuid

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.generation import GenerationMode

from history.models import Scope
from tests import states
from tests.engine.conftest import Engine, task_step

pytestmark = pytest.mark.django_db

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
# INVALID_ARGUMENT for data the description calls valid: only rules that read rows or secrets (the instance's
# definition, the step's contract, the cursor's signature). The instance's state is FAILED_PRECONDITION.
SEMANTIC = {
    "cursor",  # signed by the server: a well-formed cursor may still not be one of this list
    "target_step_key",  # must be a SIGNAL step of the instance's definition
    "result",  # a SUCCEEDED ResolveStep result satisfies the step's result contract
    "assignee",  # the actor id of an operator of the namespace
}
# Python's str.isprintable() also refuses unassigned and private-use code points, which no portable pattern
# can name (the Unicode version differs between engines): such a worker name is the only other refusal.
EXPLAINED = {"worker": lambda body: not body["worker"].isprintable()}


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
schema.config.phases.update(phases=["examples", "coverage", "fuzzing", "stateful"])
# The bearer token is the test's own (every scope): the security scheme is not generated nor negated.
schema.config.generation.update(
    modes=list(GenerationMode), max_examples=SETTINGS.max_examples, with_security_parameters=False
)
# Coverage also repeats each query parameter (refused, naming it); unexpected methods: the three write verbs,
# to keep the run short.
schema.config.phases.coverage.generate_duplicate_query_parameters = True
schema.config.phases.coverage.unexpected_methods = {"PUT", "PATCH", "DELETE"}
# 400 is a valid answer to valid data only when no_malformed_refusal_of_valid_data agrees (below).
schema.config.checks.positive_data_acceptance.expected_statuses = ["2xx", "400", "401", "403", "404", "409", "429"]


@schemathesis.check
def no_malformed_refusal_of_valid_data(ctx, response, case):
    """Data the description calls valid is never INVALID_ARGUMENT, but for the rules no schema can state."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    error = json.loads(response.content)["error"]
    field = error.get("field")
    if field in EXPLAINED and EXPLAINED[field](case.body):
        return None
    if error["code"] == "INVALID_ARGUMENT" and field not in SEMANTIC:
        raise AssertionError(f"valid data refused as malformed: {error}")
    return None


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


# Every other valid case reaches real rows (schema.given would switch the coverage phase off).
_real = itertools.cycle([True, False])


@schema.parametrize()
@SETTINGS
def test_every_operation_answers_without_5xx_and_as_described(case, real_ids, auth_header, in_process_connection):
    real = next(_real)
    if real and case.path_parameters and case.meta.generation.mode.is_positive:
        # The real instance's rows only make sense together, so every segment is replaced, or none.
        ids = real_ids["signal" in case.path_parameters]
        case.path_parameters = {name: ids.get(name, value) for name, value in case.path_parameters.items()}
    response = case.call(headers=auth_header)
    # Every check schemathesis has (none named: the configured set), and the one above.
    case.validate_response(response, headers=auth_header)


@pytest.fixture
def state_machine(tenancy, auth_header, in_process_connection):
    """Walks the links from a real definition and a real claimable task; every step passes every check."""
    engine = Engine(*tenancy)
    definition = engine.define([task_step("charge")], deadline_seconds=86400)
    engine.start(definition)
    engine.settle()

    class Walk(schema.as_state_machine()):
        def before_call(self, case):
            # Valid commands name what exists: the definition and the queue; each its own Idempotency-Key.
            positive = case.meta is None or case.meta.generation.mode.is_positive
            if positive and case.operation.label == "POST /v1/workflows" and isinstance(case.body, dict):
                case.body |= {"definition": definition.name, "version": definition.version}
            if positive and case.operation.label == "POST /v1/queues/{queue}/claim":
                case.path_parameters = {"queue": "payments"}
            if positive and case.headers and "Idempotency-Key" in case.headers:
                case.headers["Idempotency-Key"] = f"walk-{uuid.uuid4().hex}"

        def get_call_kwargs(self, case):
            return {"headers": auth_header}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, headers=auth_header)

    return Walk


def test_the_links_between_operations_hold(state_machine):
    state_machine.run(
        settings=settings(
            max_examples=8,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )


def _describes_its_answers(method: str, operation: dict) -> bool:
    """One JSON success (a recovery command also its 202 proposal), 401 (every operation authenticates), 400
    wherever a parameter or body can be malformed, every error in the error envelope, and a JSON request body on
    every POST."""
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
        len(successes) == (2 if operation.get("operationId", "").startswith("recovery_") else 1)
        and all("content" in responses[status] for status in successes)
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
