"""Command validation: every violation is INVALID_ARGUMENT naming the field, nothing written."""

import pytest

from core import exactjson
from core.errors import InvalidArgument
from history.idempotency import key_check
from recovery.operations import instance_continue, poll_continue, step_resolve, step_retry, task_review, wait_rearm
from recovery.operations.resolve_step import ResolveStepCommand
from recovery.operations.review_task import ReviewTaskCommand
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db
SURROGATE = "\ud800"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expected_revision", 20),
        ("expected_revision", "0"),
        ("expected_revision", "020"),
        ("expected_revision", "-1"),
        ("expected_revision", ""),
        ("expected_revision", "18446744073709551616"),
        ("expected_revision", "1e3"),
        ("expected_revision", None),
        ("reason", ""),
        ("reason", " \t\n\u3000"),
        ("reason", "ok\x00"),
        ("reason", "x" * 1025),
        ("reason", 5),
        ("reason", "bad " + SURROGATE),
        ("evidence_ref", ""),
        ("evidence_ref", "ticket OPS-1"),
        ("evidence_ref", "ticket:\tOPS"),
        ("evidence_ref", "ticket:\x07"),
        ("evidence_ref", "x" * 513),
        ("evidence_ref", 12),
        ("task_id", "A" * 32),
        ("task_id", "a" * 31),
        ("task_id", "12345678-1234-1234-1234-123456789012"),
        ("task_id", 1),
        ("expected_task_revision", 3),
        ("execution_settled", False),
        ("execution_settled", "true"),
        ("execution_settled", 1),
        ("conclusion", "succeeded"),
        ("conclusion", "UNKNOWN"),
        ("result", None),
        ("result", {"note": SURROGATE}),
    ],
)
def test_every_malformed_review_field_is_invalid_argument_naming_it(tenancy, recoverer, field, value):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    command[field] = rq.parsed({"v": value})["v"] if type(value) is int else value
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "INVALID_ARGUMENT", field=field)


@pytest.mark.parametrize(
    "field", ["expected_revision", "reason", "evidence_ref", "task_id", "execution_settled", "conclusion", "result"]
)
def test_a_missing_field_is_invalid_argument_naming_it(tenancy, recoverer, field):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    del command[field]
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "INVALID_ARGUMENT", field=field)


def test_unknown_keys_are_refused_by_name(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state) | {"force": True}
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "INVALID_ARGUMENT", field="force")


@pytest.mark.parametrize("body", [[], "x", None, rq.parsed(7)])
def test_a_command_that_is_not_a_flat_object_is_refused(tenancy, recoverer, body):
    state = states.task_unknown_state(tenancy)
    error = assert_refused(lambda: rq.run(instance_continue, recoverer, state, body), "INVALID_ARGUMENT")
    assert error.field == "body"


@pytest.mark.parametrize(
    ("service", "build", "flag"),
    [
        (step_retry, rq.retry, "safe_to_retry"),
        (poll_continue, rq.continue_poll, "pending_confirmed"),
        (wait_rearm, rq.rearm, "wait_verified"),
        (instance_continue, rq.continue_, "review_resolved"),
        (step_resolve, rq.resolve, "execution_settled"),
    ],
)
@pytest.mark.parametrize("value", [False, "true", "missing"])
def test_declarations_must_be_json_true(tenancy, recoverer, service, build, flag, value):
    state = states.task_failed_state(tenancy)
    command = build(state)
    if value == "missing":
        del command[flag]
    else:
        command[flag] = value
    assert_refused(lambda: rq.run(service, recoverer, state, command), "INVALID_ARGUMENT", field=flag)


@pytest.mark.parametrize("key", ["$root", "-bad", "a" * 65, "ключ", "with space", ""])
def test_step_keys_follow_the_pattern_and_root_is_never_accepted(tenancy, recoverer, key):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state, step_key=key)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "INVALID_ARGUMENT", field="step_key")


@pytest.mark.parametrize("field", ["activation_id", "expected_step_revision"])
def test_step_decision_fields_are_validated(tenancy, recoverer, field):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state, **{field: "ABC"})
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "INVALID_ARGUMENT", field=field)


def test_a_failed_conclusion_needs_a_result_other_than_null(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy, conclusion="FAILED")
    command = rq.resolve(state, conclusion="FAILED", result=None)
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "INVALID_ARGUMENT", field="result")


def test_resolve_step_requires_the_result_key(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    command = rq.resolve(state)
    del command["result"]
    assert_refused(lambda: rq.run(step_resolve, recoverer, state, command), "INVALID_ARGUMENT", field="result")


@pytest.mark.parametrize("key", ["", "x" * 129, "clé", "line\n", "\x7f", "with space", " "])
def test_idempotency_keys_are_1_to_128_printable_ascii_without_space(tenancy, recoverer, key):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    assert_refused(
        lambda: rq.run(task_review, recoverer, state, command, key=key), "INVALID_ARGUMENT", field="Idempotency-Key"
    )


@pytest.mark.parametrize("instance_id", ["A" * 32, "a" * 33, "not-an-id"])
def test_instance_ids_are_32_lowercase_hex(tenancy, recoverer, instance_id):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    assert_refused(
        lambda: task_review(identity=recoverer, instance_id=instance_id, idempotency_key="k", command=command),
        "INVALID_ARGUMENT",
        field="instance_id",
    )


def test_the_limits_themselves_are_accepted():
    command = ReviewTaskCommand.parse(
        rq.parsed(
            {
                "expected_revision": "18446744073709551615",
                "reason": "é" * 1024,
                "evidence_ref": "ü" * 512,
                "task_id": "1" * 32,
                "expected_task_revision": "1",
                "execution_settled": True,
                "conclusion": "FAILED",
                "result": exactjson.loads('{"amount":1.10,"big":12345678901234567890123}'),
            }
        )
    )
    assert command.expected_revision == 2**64 - 1
    assert command.result.text == '{"amount":1.10,"big":12345678901234567890123}'
    assert key_check("~" * 128) == "~" * 128


def test_resolve_success_results_are_checked_against_the_contract_only_later():
    command = ResolveStepCommand.parse(
        rq.parsed(
            {
                "expected_revision": "3",
                "reason": "r",
                "evidence_ref": "e",
                "step_key": "charge",
                "activation_id": "a" * 32,
                "expected_step_revision": "2",
                "execution_settled": True,
                "conclusion": "SUCCEEDED",
                "result": None,
            }
        )
    )
    assert command.result.is_null
    with pytest.raises(InvalidArgument):
        ResolveStepCommand.parse({})
