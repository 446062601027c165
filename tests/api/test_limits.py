"""Input limits on every JSON POST: each refusal is a 4xx naming the field or the limit, and writes nothing.

The JSON POSTs are read from the URLconf (as the security sweep does), so a new route cannot be left
out: body size (413 before the body is read), nesting depth, number length, stored JSON size, bounded
integers, lone surrogates and hidden characters in text, and one Idempotency-Key syntax everywhere.
"""

import io
import json
from types import SimpleNamespace

import pytest
from django.test import override_settings

from api.parsing import ExactJSONParser
from core import exactjson, limits
from core.errors import InvalidArgument, PayloadTooLarge
from engine.definitions import contract_violation
from history.models import WorkflowInstance
from recovery.commands import ExactResult
from recovery.contracts import result_contract_check
from tests.recovery.digest import history_digest
from tests.reliability import test_security as sweep

pytestmark = pytest.mark.django_db

# The security sweep's world: one instance of every history kind; the fixture keeps its name.
security_world = sweep.security_world
JSON_POSTS = [e for e in sweep.ENDPOINTS if e.method == "POST"]
BY_NAME = {e.name.rsplit("/", 1)[1] if "/recovery/" in e.route else e.name: e for e in JSON_POSTS}
START, SIGNAL = "POST /v1/workflows", "POST /v1/workflows/<str:id>/signals"
CONTROLS = [f"POST /v1/workflows/<str:id>/{a}" for a in ("pause", "resume", "cancel")]
CLAIM, HEARTBEAT = "POST /v1/queues/<str:queue>/claim", "POST /v1/tasks/<str:task_id>/heartbeat"
COMPLETE = "POST /v1/tasks/<str:task_id>/complete"
NOTE = "POST /v1/workflows/<str:id>/notes"
DECISION = "POST /v1/workflows/<str:id>/decisions"
RECOVERY = ["review-task", "resolve-step", "continue-poll", "rearm-wait", "continue", "retry-step"]
KEYED = [START, SIGNAL, *RECOVERY, NOTE, DECISION]
# Characters no text field accepts: a lone surrogate, NUL, a bidi override, a zero-width space, a C1 control.
HIDDEN = ["\ud800", "\x00", "\u202e", "\u200b", "\x85"]


def ascii_json(value) -> str:
    """Exact JSON text with every non-ASCII character escaped, so lone surrogates travel as \\uXXXX."""
    return "".join(ch if ch < "\x80" else json.dumps(ch)[1:-1] for ch in exactjson.dumps(value))


@pytest.fixture
def post(api, security_world):
    """post(name, body=…, key=…, **extra) → (response, whether the history tables are unchanged)."""
    token = sweep._issue(security_world.namespace)
    keys = iter(range(1, 10_000))

    def do(name: str, body=None, *, key=None, mutate=None, **extra):
        endpoint = BY_NAME[name]
        if body is None:
            body = dict(endpoint.body(security_world))
            if mutate:
                mutate(body)
        text = body if isinstance(body, (str, bytes)) else ascii_json(body)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_IDEMPOTENCY_KEY": key or f"limits-{next(keys)}"}
        before = history_digest()
        response = api.post(
            endpoint.path(security_world), data=text, content_type="application/json", **headers, **extra
        )
        return SimpleNamespace(response=response, unchanged=history_digest() == before)

    return do


def assert_refused(sent, status: int, field: str, *words: str) -> str:
    """The answer is ``status`` INVALID_ARGUMENT naming ``field`` (and the words), and nothing was written."""
    response = sent.response
    assert response.status_code == status, response.content[:400]
    error = json.loads(response.content)["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error.get("field") == field, error
    for word in words:
        assert word in error["message"], error
    assert sent.unchanged, "a refused request wrote"
    return error["message"]


def test_every_json_post_the_urlconf_serves_is_covered():
    assert {(e.route, e.method) for e in JSON_POSTS} == {r for r in sweep.served_endpoints() if r[1] == "POST"}
    assert len(JSON_POSTS) == 29 and len(BY_NAME) == 29


# ---- the body --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BY_NAME))
@override_settings(WEAVE_MAX_BODY_BYTES=4096)
def test_a_body_over_the_limit_is_413_naming_the_limit_and_its_setting(post, security_world, name):
    body = ascii_json(BY_NAME[name].body(security_world))
    padded = body[:-1] + " " * (4097 - len(body)) + "}"  # the same command, one byte over the limit
    assert len(padded) == 4097
    assert_refused(post(name, padded), 413, "body", "4096", "WEAVE_MAX_BODY_BYTES")


@override_settings(WEAVE_MAX_BODY_BYTES=4096)
def test_a_body_at_the_limit_is_read(post, security_world):
    body = ascii_json(BY_NAME[START].body(security_world))
    assert post(START, body[:-1] + " " * (4096 - len(body)) + "}").response.status_code == 201


def test_the_default_body_limit_is_one_mebibyte(post):
    assert limits.max_body_bytes() == 1024 * 1024
    sent = post(START, {"definition": "payment", "input": "x" * (1024 * 1024)})
    assert_refused(sent, 413, "body", "1048576", "WEAVE_MAX_BODY_BYTES")


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(post):
    # The test client's payload refuses reads past its real size: reading would fail the request.
    sent = post(START, "{}", CONTENT_LENGTH=str(10**12))
    assert_refused(sent, 413, "body", "WEAVE_MAX_BODY_BYTES")


@override_settings(WEAVE_MAX_BODY_BYTES=100)
def test_a_body_without_a_length_is_read_only_one_byte_past_the_limit():
    stream = io.BytesIO(b"[" + b" " * 10_000 + b"]")
    with pytest.raises(PayloadTooLarge) as info:
        ExactJSONParser().parse(stream, parser_context={"request": SimpleNamespace(META={})})
    assert info.value.field == "body" and stream.tell() == 101


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("levels", [limits.MAX_JSON_DEPTH + 1, 100_000])
def test_a_body_nested_deeper_than_the_limit_is_400_naming_the_body(post, name, levels):
    body = '{"reason":' + "[" * levels + "]" * levels + "}"
    assert_refused(post(name, body), 400, "body", str(limits.MAX_JSON_DEPTH))


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("digits", [limits.MAX_NUMBER_CHARS + 1, 5000])
def test_a_number_literal_longer_than_the_limit_is_400_naming_the_body(post, security_world, name, digits):
    body = ascii_json(BY_NAME[name].body(security_world))
    body = '{"n":' + "9" * digits + "," + body[1:]
    assert_refused(post(name, body), 400, "body", str(limits.MAX_NUMBER_CHARS))


# ---- stored JSON values ----------------------------------------------------------------------------------

JSON_FIELDS = [(START, "input"), (SIGNAL, "payload"), (COMPLETE, "result")]
JSON_FIELDS += [("review-task", "result"), ("resolve-step", "result")]


@pytest.mark.parametrize(("name", "field"), JSON_FIELDS)
@override_settings(WEAVE_MAX_JSON_BYTES=1024)
def test_a_client_json_value_over_the_stored_size_is_413_naming_the_field(post, name, field):
    sent = post(name, mutate=lambda body: body.update({field: {"blob": "é" * 600}}))
    assert_refused(sent, 413, field, "1024", "WEAVE_MAX_JSON_BYTES")


@override_settings(WEAVE_MAX_JSON_BYTES=1024)
def test_a_client_json_value_at_the_stored_size_is_kept(post):
    value = {"blob": "x" * (1024 - len('{"blob":""}'))}
    sent = post(START, mutate=lambda body: body.update({"input": value}))
    assert sent.response.status_code == 201
    instance = WorkflowInstance.objects.get(pk=json.loads(sent.response.content)["data"]["id"])
    assert len(instance.input.encode()) == 1024


@pytest.mark.parametrize(("name", "field"), JSON_FIELDS)
@pytest.mark.parametrize(
    "value", [{"note": "\ud800"}, {"\udfff": True}, ["ok", "\udc00"]], ids=["value", "key", "item"]
)
def test_a_lone_surrogate_in_a_client_json_value_or_key_is_400_naming_the_field(post, name, field, value):
    assert_refused(post(name, mutate=lambda body: body.update({field: value})), 400, field, "surrogate")


# ---- integers ------------------------------------------------------------------------------------------

INTEGER_FIELDS = [
    (START, "version"),
    (START, "deadline_seconds"),
    (SIGNAL, "target_activation_sequence"),
    (CLAIM, "lease_seconds"),
    (HEARTBEAT, "lease_seconds"),
]
BAD_INTEGERS = ["9" * 250, "0", "-1", "1.5", "1e3", "4294967296", "true", '"5"', "null"]


@pytest.mark.parametrize(
    ("name", "field", "literal"),
    # A null deadline_seconds means no deadline: it is the one field where null is a value.
    [(n, f, v) for n, f in INTEGER_FIELDS for v in BAD_INTEGERS if (f, v) != ("deadline_seconds", "null")],
)
def test_an_integer_field_out_of_range_or_not_an_integer_is_400_naming_it(post, name, field, literal):
    sent = post(name, mutate=lambda body: body.update({field: exactjson.Raw(literal)}))
    assert_refused(sent, 400, field, f"{field} must be an integer from 1 to")


@pytest.mark.parametrize(("name", "field"), INTEGER_FIELDS)
def test_an_integer_field_over_4300_digits_is_400_not_500(post, name, field):
    sent = post(name, mutate=lambda body: body.update({field: exactjson.Raw("9" * 5000)}))
    assert_refused(sent, 400, "body", str(limits.MAX_NUMBER_CHARS))


# ---- text ----------------------------------------------------------------------------------------------

TEXT_FIELDS = [
    (START, "business_key"),
    (SIGNAL, "reason"),
    (SIGNAL, "correlation_key"),
    (SIGNAL, "name"),
    (SIGNAL, "payload_version"),
    (SIGNAL, "evidence_ref"),
    *[(control, "reason") for control in CONTROLS],
    (CLAIM, "worker"),
    *[(operation, "reason") for operation in RECOVERY],
    *[(operation, "evidence_ref") for operation in RECOVERY],
    (NOTE, "text"),
    (NOTE, "evidence_ref"),
    ("POST /v1/workflows/<str:id>/assign", "assignee"),
]


@pytest.mark.parametrize(("name", "field"), TEXT_FIELDS)
@pytest.mark.parametrize("char", HIDDEN, ids=["surrogate", "nul", "bidi", "zero-width", "c1"])
def test_a_hidden_character_in_a_text_field_is_400_naming_it(post, name, field, char):
    sent = post(name, mutate=lambda body: body.update({field: f"ok{char}ok"}))
    assert_refused(sent, 400, field, f"{field} must be ")


@pytest.mark.parametrize("field", ["reason", "evidence_ref"])
def test_engine_and_recovery_answer_the_same_text_the_same_way(post, field):
    messages = {
        assert_refused(post(name, mutate=lambda body: body.update({field: "a\u202eb"})), 400, field)
        for name in (SIGNAL, *RECOVERY)
    }
    assert len(messages) == 1


@pytest.mark.parametrize("name", KEYED)
@pytest.mark.parametrize("key", ["with space", "x" * 129, "clé"])
def test_every_keyed_endpoint_refuses_the_same_idempotency_keys_the_same_way(post, name, key):
    message = assert_refused(post(name, key=key.encode().decode("latin-1")), 400, "Idempotency-Key")
    assert message == "Idempotency-Key must be 1 to 128 printable ASCII characters without space"


def test_a_reused_key_for_another_command_is_already_exists_naming_the_header(post):
    assert post(START, key="same-key").response.status_code == 201
    sent = post(START, key="same-key", mutate=lambda body: body.update({"business_key": "another command"}))
    assert sent.response.status_code == 409 and sent.unchanged
    error = json.loads(sent.response.content)["error"]
    assert error["code"] == "ALREADY_EXISTS" and error["field"] == "Idempotency-Key"


# ---- the background: contract checks never convert unbounded text -------------------------------------


def test_a_stored_value_beyond_the_limits_breaks_the_contract_instead_of_raising():
    spec = {"contract": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    huge = '{"n":' + "9" * 5000 + "}"
    assert "cannot be checked" in contract_violation(step_spec=spec, value_text=huge)
    deep = "[" * 100_000 + "]" * 100_000
    assert "cannot be checked" in contract_violation(step_spec=spec, value_text=deep)
    with pytest.raises(InvalidArgument) as info:
        result_contract_check(spec=spec, result=ExactResult(text=huge, value=None))
    assert info.value.field == "result"
