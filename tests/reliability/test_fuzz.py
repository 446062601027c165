"""Fuzzed API inputs: every bad command field, header, path segment and query parameter answers a 4xx in the
error envelope, names the field it blames and writes nothing.

The expected answers come from the rules as docs/api.md states them (ids, step keys, revisions, limits),
written here independently of the product's validators. Requests carry valid credentials and target a real
instance in review, so every check runs past authentication; the recovery tests end by sending the unmutated
commands, which must commit.
"""

import functools
import json
import re
from dataclasses import dataclass
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from console.admin import CONTROLS
from console.forms import ControlForm, SignalForm, recovery_form_class
from core import exactjson, limits
from core.ids import new_id
from history.models import Scope
from recovery.operations import OPERATIONS as RECOVERY_OPERATIONS
from testkit import requests as rq
from testkit import states
from testkit.driver import Engine
from tests.conftest import bearer
from tests.recovery.digest import history_digest
from tests.reliability import test_security
from tests.reliability.test_security import ENDPOINTS, _issue, served_endpoints

pytestmark = pytest.mark.django_db
# The security sweep's world: an instance in review with a row of every kind, a startable definition, a queue.
security_world = test_security.security_world

FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every CI run; raise max_examples locally to search wider
    database=None,  # no example files shared between xdist workers
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ID = re.compile(r"[0-9a-f]{32}")
STEP_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
QUEUE_NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")
LIMIT = re.compile(r"[1-9][0-9]?|100")
IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,128}")
MAX_REVISION = 2**64 - 1
NOT_CHECKED = object()

# ---- strategies ----------------------------------------------------------------------------------------------

ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates included: JSON can escape them
TEXT = st.text(ANY_CHAR, max_size=40)
URL_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)  # a URL carries UTF-8 only
LATIN1 = st.text(st.characters(max_codepoint=0xFF), max_size=200)  # what a WSGI header value can hold
# Long enough for any field, short enough that the body stays under WEAVE_MAX_BODY_BYTES.
HUGE = st.sampled_from([1_025, 70_000, 600_000]).map(lambda n: "x" * n)
NUMBERS = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e99999", "-0", "9" * 256, "0.1e-250", "7"]),  # within the number-length limit
).map(exactjson.Number)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
NOT_TEXT = st.none() | st.booleans() | NUMBERS | st.lists(JSON, max_size=3) | st.dictionaries(TEXT, JSON, max_size=3)
SURROGATE = st.characters(categories=["Cs"])


def _around(middle: st.SearchStrategy) -> st.SearchStrategy:
    """Text with ``middle`` somewhere inside it."""
    return st.tuples(TEXT, middle, TEXT).map("".join)


def _revision_ok(text: str) -> bool:
    return re.fullmatch(r"[1-9][0-9]*", text) is not None and int(text) <= MAX_REVISION


def _id_ok(text: str) -> bool:
    return ID.fullmatch(text) is not None


def _step_key_ok(text: str) -> bool:
    return STEP_KEY.fullmatch(text) is not None


BAD_REVISION = NOT_TEXT | TEXT.filter(lambda t: not _revision_ok(t)) | st.sampled_from(["0", "007", "٣", "1 "])
BAD_REVISION |= st.just(str(MAX_REVISION + 1))
BAD_REASON = NOT_TEXT | HUGE | _around(st.just("\x00")) | _around(SURROGATE) | st.sampled_from(["", " \t\n", "\u3000"])
BAD_EVIDENCE = NOT_TEXT | HUGE | _around(SURROGATE) | st.just("")
BAD_EVIDENCE |= _around(st.sampled_from([" ", "\t", "\n", "\x00", "\x7f", "\x85", "\u00a0", "\u2028", "\u3000"]))
BAD_ID = NOT_TEXT | TEXT.filter(lambda t: not _id_ok(t)) | st.sampled_from(["A" * 32, "a" * 31, "a" * 33, "０" * 32])
BAD_STEP_KEY = NOT_TEXT | TEXT.filter(lambda t: not _step_key_ok(t)) | st.sampled_from(["$root", "k" * 65, "ｋ", "-a"])
NOT_TRUE = JSON.filter(lambda v: v is not True) | st.sampled_from(["true", exactjson.Number("1")])
BAD_CONCLUSION = NOT_TEXT | TEXT.filter(lambda t: t not in ("SUCCEEDED", "FAILED"))
BAD_CONCLUSION |= st.sampled_from(["succeeded", "FAILED ", "PENDING", "SUCCEEDED\x00"])
UNENCODABLE_RESULT = st.tuples(JSON, SURROGATE).map(list) | SURROGATE.map(lambda s: {s: True})

BAD_FIELD = {
    "expected_revision": BAD_REVISION,
    "expected_task_revision": BAD_REVISION,
    "expected_step_revision": BAD_REVISION,
    "reason": BAD_REASON,
    "evidence_ref": BAD_EVIDENCE,
    "task_id": BAD_ID,
    "activation_id": BAD_ID,
    "step_key": BAD_STEP_KEY,
    "execution_settled": NOT_TRUE,
    "safe_to_retry": NOT_TRUE,
    "pending_confirmed": NOT_TRUE,
    "wait_verified": NOT_TRUE,
    "review_resolved": NOT_TRUE,
    "conclusion": BAD_CONCLUSION,
    "result": UNENCODABLE_RESULT,
}
REVIEW_RESULT = UNENCODABLE_RESULT | st.none()  # ReviewTask's result is never null

# ---- requests and answers ------------------------------------------------------------------------------------


def ascii_json(value) -> str:
    """Exact JSON text with every non-ASCII character escaped, so lone surrogates travel as \\uXXXX."""
    return "".join(ch if ch < "\x80" else json.dumps(ch)[1:-1] for ch in exactjson.dumps(value))


def _envelope_error(response) -> dict:
    """The error of an error envelope: {request_id, error{code, message, field?}}, the id echoed in X-Request-Id."""
    body = json.loads(response.content)
    assert set(body) == {"request_id", "error"} and ID.fullmatch(body["request_id"])
    assert body["request_id"] == response["X-Request-Id"]
    error = body["error"]
    assert set(error) <= {"code", "message", "field"} and {"code", "message"} <= set(error)
    assert isinstance(error["message"], str) and error["message"]
    return error


def assert_error(response, status: int, code: str, field=NOT_CHECKED) -> None:
    """The answer is ``status`` with the error envelope holding ``code`` (and naming ``field`` when given)."""
    assert response.status_code == status, response.content[:500]
    error = _envelope_error(response)
    assert error["code"] == code, error
    if field is not NOT_CHECKED:
        assert error.get("field") == field, error


def assert_client_error(response) -> None:
    """Any 4xx in the error envelope."""
    assert 400 <= response.status_code < 500, response.content[:500]
    _envelope_error(response)


OPERATIONS = [
    ("review-task", rq.review, states.task_unknown_state),
    ("resolve-step", rq.resolve, states.task_reviewed_state),
    ("continue-poll", rq.continue_poll, states.poll_pending_reviewed_state),
    ("rearm-wait", rq.rearm, states.signal_contract_violation_state),
    ("continue", rq.continue_, states.task_resolved_state),
    ("retry-step", rq.retry, states.task_failed_state),
]


@pytest.fixture
def everything_token(issue_token):
    """A token holding every scope on every queue: no refusal below comes from authorization."""
    return issue_token(scopes=[s.value for s in Scope]).token


def _recovery(api, tenancy, token: str, operation: str, build, make) -> SimpleNamespace:
    """One operation on a state where its valid command commits; ``post(body)`` sends a body to it."""
    state = make(tenancy)
    url = f"/v1/workflows/{state.instance.id}/recovery/{operation}"

    def post(body: str | bytes, *, key=f"fuzz-{operation}", content_type="application/json", token=token, **extra):
        headers = (bearer(token) if token else {}) | ({"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {})
        return api.generic("POST", url, body, content_type, **headers, **extra)

    return SimpleNamespace(operation=operation, state=state, command=build(state), post=post, url=url)


@pytest.fixture(params=OPERATIONS, ids=[name for name, _, _ in OPERATIONS])
def recovery(request, api, tenancy, everything_token):
    return _recovery(api, tenancy, everything_token, *request.param)


@pytest.fixture
def operations(api, tenancy, everything_token):
    """Every recovery operation at once, for inputs every one of them treats alike (headers, body framing)."""
    return [_recovery(api, tenancy, everything_token, *operation) for operation in OPERATIONS]


@pytest.fixture
def unchanged():
    """``unchanged()`` asserts that no history row changed since the fixture was set up (request it last)."""
    before = history_digest()

    def check():
        assert history_digest() == before

    return check


def _commits(*recoveries) -> None:
    """The unmutated commands commit: the refusals were the fuzzed input's, not the state's."""
    for recovery in recoveries:
        response = recovery.post(ascii_json(recovery.command))
        assert response.status_code == 200, response.content[:500]


# ---- recovery commands ---------------------------------------------------------------------------------------


def test_a_single_bad_command_field_is_400_naming_it_and_writes_nothing(recovery, unchanged):
    @settings(FUZZ, max_examples=60)
    @given(st.data())
    def check(data):
        name = data.draw(st.sampled_from(sorted(recovery.command)), label="field")
        bad = REVIEW_RESULT if (recovery.operation, name) == ("review-task", "result") else BAD_FIELD[name]
        value = data.draw(bad, label="value")
        response = recovery.post(ascii_json(recovery.command | {name: value}))
        assert_error(response, 400, "INVALID_ARGUMENT", name)
        unchanged()

    check()
    _commits(recovery)


UNKNOWN_NAME = URL_TEXT | st.sampled_from(
    ["", "\x00", "Reason", "reason ", "__proto__", "é" * 300, "\ud800", "a\udfffb"]
)


def test_an_unknown_command_field_is_400_naming_it(recovery, unchanged):
    @FUZZ
    @given(name=UNKNOWN_NAME.filter(lambda n: n not in recovery.command), value=JSON)
    def check(name, value):
        response = recovery.post(ascii_json(recovery.command | {name: value}))
        assert_error(response, 400, "INVALID_ARGUMENT", name)
        unchanged()

    check()
    _commits(recovery)


def test_an_unknown_field_named_with_a_lone_surrogate_is_400_naming_it(operations, unchanged):
    for recovery in operations:
        assert_error(recovery.post('{"\\ud800": 1}'), 400, "INVALID_ARGUMENT", "\ud800")
    unchanged()


def test_a_missing_command_field_is_400_naming_it(recovery, unchanged):
    for name in recovery.command:
        body = {k: v for k, v in recovery.command.items() if k != name}
        assert_error(recovery.post(ascii_json(body)), 400, "INVALID_ARGUMENT", name)
    unchanged()
    _commits(recovery)


def _duplicated(command: dict, name: str, value) -> str:
    """The command's JSON text with ``name`` sent a second time."""
    return "{" + ascii_json(name) + ":" + ascii_json(value) + "," + ascii_json(command)[1:]


def test_a_body_that_is_not_one_json_object_is_400(operations, unchanged):
    not_json = st.binary(max_size=60).filter(lambda b: not _parses(b))
    not_an_object = JSON.filter(lambda v: not isinstance(v, dict)).map(ascii_json)
    not_utf8 = st.just(b'{"reason": "\xff\xfe"}')

    @FUZZ
    @given(data=st.data())
    def check(data):
        recovery = data.draw(st.sampled_from(operations), label="operation")
        name = st.sampled_from(sorted(recovery.command))
        duplicate_key = st.builds(_duplicated, st.just(recovery.command), name, JSON)
        body = data.draw(not_json | not_an_object | duplicate_key | not_utf8, label="body")
        assert_error(recovery.post(body), 400, "INVALID_ARGUMENT")
        unchanged()

    check()
    _commits(*operations)


def _parses(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw.decode("utf-8")), dict)
    except ValueError:
        return False


# ---- headers -------------------------------------------------------------------------------------------------


def test_a_bad_authorization_header_is_401_with_a_bearer_challenge(operations, unchanged, api):
    anything = LATIN1 | LATIN1.map("Bearer ".__add__) | st.sampled_from(["Bearer", "bearer  x", "Basic Zm9vOmJhcg=="])

    @FUZZ
    @given(header=anything, read=st.booleans(), recovery=st.sampled_from(operations))
    def check(header, read, recovery):
        extra = {"HTTP_AUTHORIZATION": header}
        if read:
            response = api.get(f"/v1/workflows/{recovery.state.instance.id}", **extra)
        else:
            response = recovery.post(ascii_json(recovery.command), token=None, **extra)
        assert_error(response, 401, "UNAUTHENTICATED")
        assert response["WWW-Authenticate"].startswith("Bearer")
        unchanged()

    check()
    _commits(*operations)


def test_a_bad_idempotency_key_is_400_naming_the_header(operations, unchanged):
    @FUZZ
    @given(
        key=LATIN1.filter(lambda k: IDEMPOTENCY_KEY.fullmatch(k) is None) | st.just("k" * 129),
        recovery=st.sampled_from(operations),
    )
    def check(key, recovery):
        response = recovery.post(ascii_json(recovery.command), key=key)
        assert_error(response, 400, "INVALID_ARGUMENT", "Idempotency-Key")
        unchanged()

    check()
    _commits(*operations)


MEDIA_TYPE = st.from_regex(r"[a-z]{1,12}/[a-z0-9.+-]{1,20}(; ?[a-z]{1,8}=[a-z0-9-]{1,8})?", fullmatch=True)


def test_a_body_that_is_not_json_by_its_content_type_is_400(operations, unchanged):
    @FUZZ
    @given(
        content_type=MEDIA_TYPE | LATIN1 | st.sampled_from(["text/plain", "application/x-www-form-urlencoded"]),
        recovery=st.sampled_from(operations),
    )
    def check(content_type, recovery):
        # Only JSON is parsed; a wildcard would match it, so those are left out.
        assume("json" not in content_type.lower() and "*" not in content_type)
        response = recovery.post(ascii_json(recovery.command), content_type=content_type)
        assert_error(response, 400, "INVALID_ARGUMENT")
        unchanged()

    check()
    _commits(*operations)


def test_an_unsupported_content_type_is_400_naming_the_header(operations, unchanged):
    for recovery in operations:
        response = recovery.post(ascii_json(recovery.command), content_type="text/plain")
        assert_error(response, 400, "INVALID_ARGUMENT", "Content-Type")
    unchanged()


# ---- path segments -------------------------------------------------------------------------------------------


@pytest.fixture
def paths(tenancy):
    """Every (method, path template) of the API and a value for each segment, real where rows exist."""
    poll = states.poll_pending_reviewed_state(tenancy)
    signal = states.signal_contract_violation_state(tenancy)
    ids = {
        "id": signal.instance.id,
        "key": poll.step.key,
        "activation": poll.activation.id,
        "signal": signal.signals[0].id,
        "operation": new_id(),
        "task": poll.task.id,
    }
    w = "/v1/workflows/{id}"
    templates = [
        ("GET", w),
        ("GET", w + "/steps/{key}/activations"),
        ("GET", w + "/steps/{key}/activations/{activation}"),
        ("GET", w + "/steps/{key}/activations/{activation}/rounds"),
        ("GET", w + "/signals"),
        ("GET", w + "/signals/{signal}"),
        ("GET", w + "/signals/{signal}/operations"),
        ("GET", w + "/signals/{signal}/operations/{operation}"),
        ("GET", w + "/tasks/{task}"),
        ("GET", w + "/operations"),
        ("POST", w + "/signals"),
        ("POST", w + "/pause"),
        ("POST", w + "/resume"),
        ("POST", w + "/cancel"),
        ("POST", "/v1/tasks/{task_id}/heartbeat"),
        ("POST", "/v1/tasks/{task_id}/complete"),
        ("POST", "/v1/queues/{queue}/claim"),
        *(("POST", w.replace("{id}", "{instance_id}") + "/recovery/" + name) for name, _, _ in OPERATIONS),
    ]
    ids |= {"instance_id": ids["id"], "task_id": ids["task"], "queue": states.QUEUE}
    return SimpleNamespace(templates=templates, ids=ids)


LIST_ENDS = ("/activations", "/rounds", "/signals", "/operations")
SEGMENT_VALID = {
    "id": _id_ok,
    "instance_id": _id_ok,
    "activation": _id_ok,
    "signal": _id_ok,
    "operation": _id_ok,
    "task": _id_ok,
    "task_id": _id_ok,
    "key": lambda s: _step_key_ok(s) and s != "$root",
    "queue": lambda s: QUEUE_NAME.fullmatch(s) is not None,
}
SEGMENT = st.one_of(
    URL_TEXT.map(lambda s: s.encode()),
    st.binary(max_size=40),
    st.sampled_from([b"$root", b"A" * 32, b"a" * 33, b".", b"..", b"%2F", b"\x00", b"x" * 5000]),
    st.from_regex(r"[0-9a-f]{32}", fullmatch=True).map(str.encode),
)


def _request(api, method: str, path: str, token: str):
    headers = bearer(token) | {"HTTP_IDEMPOTENCY_KEY": "fuzz-key"}
    if method == "GET":
        return api.get(path, **headers)
    return api.post(path, data="{}", content_type="application/json", **headers)


def test_a_bad_path_segment_is_400_naming_it_and_an_unknown_one_a_4xx(api, paths, everything_token, unchanged):
    @FUZZ
    @given(data=st.data(), raw=SEGMENT)
    def check(data, raw):
        method, template = data.draw(st.sampled_from(paths.templates), label="endpoint")
        name = data.draw(st.sampled_from(re.findall(r"\{(\w+)\}", template)), label="segment")
        # The server sees the segment UTF-8 decoded, undecodable bytes kept percent-encoded.
        seen = raw.decode("utf-8", errors="replace")
        unrouted = not raw or b"/" in raw
        malformed = not SEGMENT_VALID[name](seen) or "\ufffd" in seen
        # A well-formed queue name is a real claim (200, claimed or not): only malformed ones are fuzzed there.
        assume(name != "queue" or unrouted or malformed)
        path = template.format(**(paths.ids | {name: quote(raw, safe="")}))
        response = _request(api, method, path, everything_token)
        if unrouted:
            assert_error(response, 404, "NOT_FOUND")
        elif malformed:
            assert_error(response, 400, "INVALID_ARGUMENT", name)
        else:
            assert_client_error(response)
        unchanged()

    check()


def test_an_unknown_recovery_operation_is_404(api, operations, everything_token, unchanged):
    review = operations[0]

    @FUZZ
    @given(name=URL_TEXT.filter(lambda n: n not in {op for op, _, _ in OPERATIONS}))
    def check(name):
        url = f"/v1/workflows/{review.state.instance.id}/recovery/{quote(name, safe='')}"
        response = api.post(
            url, data=ascii_json(review.command), content_type="application/json", **bearer(everything_token)
        )
        assert_error(response, 404, "NOT_FOUND")
        unchanged()

    check()


# ---- query parameters ----------------------------------------------------------------------------------------


def test_a_bad_query_parameter_is_400_naming_it(api, paths, everything_token, unchanged):
    reads = [(t.format(**paths.ids), t.endswith(LIST_ENDS)) for method, t in paths.templates if method == "GET"]
    bad_limit = st.one_of(URL_TEXT, st.integers().map(str), st.just("1" * 500)).filter(lambda v: not LIMIT.fullmatch(v))
    unknown = st.tuples(URL_TEXT.filter(lambda n: n not in ("limit", "cursor")), URL_TEXT)

    @FUZZ
    @given(data=st.data())
    def check(data):
        path, is_list = data.draw(st.sampled_from(reads), label="endpoint")
        cases = [unknown.map(lambda p: ([p], p[0]))]
        if is_list:
            cases += [
                bad_limit.map(lambda v: ([("limit", v)], "limit")),
                URL_TEXT.map(lambda v: ([("cursor", v)], "cursor")),
                st.sampled_from(["limit", "cursor"]).map(lambda n: ([(n, "5"), (n, "5")], n)),
            ]
        else:
            cases += [st.sampled_from(["limit", "cursor"]).map(lambda n: ([(n, "5")], n))]
        pairs, field = data.draw(st.one_of(cases), label="query")
        query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)
        response = api.get(f"{path}?{query}", **bearer(everything_token))
        assert_error(response, 400, "INVALID_ARGUMENT", field)
        unchanged()

    check()


# ---- the bad-input matrix: every class of bad input to every JSON POST and every admin form ------------------
#
# One test per (endpoint or form, class of input); inside it, every field the class applies to. The fields and
# their kinds come from the served OpenAPI description, the endpoints from the URLconf (as the security sweep
# reads them), so a new field or route is fuzzed without editing this list. Each answer is < 500, a 4xx in the
# error envelope naming the field (or the limit), and nothing is written.

DEEP = 100_000
TOO_DEEP = limits.MAX_JSON_DEPTH + 1
HUGE_NUMBER = exactjson.Number("9" * 5_000)
# NUL, a C1 control, a bidi override and a zero-width space: each disguises or truncates audit text.
HIDDEN = {"nul": "\x00", "c1": "\x85", "bidi": "\u202e", "zero-width": "\u200b"}
LIMIT_WORDS = ("depth", "deep", "nest", "level", "digit", "number", "large", "bytes", "size", "limit")


def _nested(depth: int, leaf=0):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _nested_text(depth: int) -> str:
    return "[" * depth + "0" + "]" * depth


@functools.cache
def _request_schemas() -> dict[str, dict]:
    """path template → the properties of its request body (every variant's), as the description states them."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    components = document["components"]["schemas"]

    def resolve(node):
        if "$ref" in node:
            return resolve(components[node["$ref"].rsplit("/", 1)[1]])
        if "allOf" in node:  # a described reference: the component plus its description
            return resolve(node["allOf"][0]) | {k: v for k, v in node.items() if k != "allOf"}
        return node

    found = {}
    for path, item in document["paths"].items():
        post = item.get("post")
        if post is None:
            continue
        body = resolve(post["requestBody"]["content"]["application/json"]["schema"])
        properties = {}
        for variant in body.get("oneOf", [body]):
            for name, node in resolve(variant).get("properties", {}).items():  # {} for a body with no fields
                properties.setdefault(name, resolve(node))
        found[path] = properties
    return found


def _kind(node: dict) -> str:
    """json (any value), integer, boolean or string: what a field holds, per its description."""
    return node.get("type", "json")


def _template(route: str) -> str:
    return "/" + re.sub(r"<str:(\w+)>", r"{\1}", route)


SEND_POSTS = [e for e in ENDPOINTS if e.method == "POST"]
IDEMPOTENT_ROUTES = {"v1/workflows", "v1/workflows/<str:id>/signals"}


def test_the_matrix_posts_to_exactly_the_json_posts_the_urlconf_serves():
    assert {(e.route, "POST") for e in SEND_POSTS} == {s for s in served_endpoints() if s[1] == "POST"}
    assert {_template(e.route) for e in SEND_POSTS} == set(_request_schemas())


@dataclass(frozen=True)
class Sent:
    field: str  # what the answer must name: a body field, a header, or "" for the body as a whole
    value: str  # a short description of the input, for the failure list
    response: object


def _names(error: dict, field: str) -> bool:
    """The error names ``field``, or, for a body-wide limit, the limit."""
    if error.get("field") == field:
        return True
    return field == "" and (error.get("field") is not None or any(w in error["message"].lower() for w in LIMIT_WORDS))


def _whole_body_limit_or_field(error: dict, field: str) -> bool:
    # A number or nesting limit may be named as the limit itself rather than the field that broke it.
    return _names(error, field) or any(w in error["message"].lower() for w in LIMIT_WORDS)


def _wrong_values(kind: str) -> list:
    every = {
        "string": "text",
        "integer": exactjson.Number("7"),
        "boolean": True,
        "array": [],
        "object": {},
        "null": None,
    }
    same = {"string": ("string",), "integer": ("integer",), "boolean": ("boolean",)}[kind]
    return [value for name, value in every.items() if name not in same and not (kind == "integer" and name == "null")]


def _api_cases(kind: str, endpoint, body: dict, fields: dict) -> list[tuple[str, str, str, dict]]:
    """(field to name, description, body text, extra headers) of one input class for one endpoint's valid body."""
    cases = []

    def with_field(name, value):
        return ascii_json(body | {name: value})

    def with_raw(name, text):
        # Too deep for any encoder to write: the value goes into the text as it is.
        marker = "\x01raw\x01"
        return with_field(name, marker).replace(ascii_json(marker), text)

    if kind == "oversized":
        pad = "x" * (limits.max_body_bytes() + 1)
        text_field = next((n for n in body if isinstance(body[n], str) and n != "expected_control_revision"), None)
        field = text_field or next(iter(body), "pad")
        cases.append(("", f"{field}: {len(pad)} characters", with_field(field, pad), {}))
    elif kind == "deep-100000":
        cases.append(("", f"the body nested {DEEP} levels", _nested_text(DEEP), {}))
        for name, node in fields.items():
            if _kind(node) == "json":
                cases.append((name, f"{name} nested {DEEP} levels", with_raw(name, _nested_text(DEEP)), {}))
    elif kind == "deep-65":
        for name in fields:
            cases.append((name, f"{name} nested {TOO_DEEP} levels", with_field(name, _nested(TOO_DEEP)), {}))
    elif kind == "huge-number":
        for name, node in fields.items():
            if _kind(node) in ("json", "integer"):
                cases.append((name, f"{name}: a 5000-digit number", with_field(name, HUGE_NUMBER), {}))
            if _kind(node) == "json":
                inside = {"paid": True, "amount": HUGE_NUMBER}
                cases.append((name, f"{name}: an object holding a 5000-digit number", with_field(name, inside), {}))
    elif kind == "surrogate":
        for name, node in fields.items():
            if _kind(node) in ("string", "json"):
                cases.append((name, f"{name}: a lone surrogate", with_field(name, "a\ud800b"), {}))
            if _kind(node) == "json":
                cases.append((name, f"{name}: a lone surrogate key", with_field(name, {"\udfff": 1}), {}))
        cases.append(("\ud800", "a top-level key with a lone surrogate", with_field("\ud800", 1), {}))
    elif kind == "hidden":
        for name, node in fields.items():
            if "pattern" in node and _kind(node) == "string" and "[^" in node["pattern"]:
                for label, char in HIDDEN.items():
                    cases.append((name, f"{name}: {label}", with_field(name, f"ok{char}ok"), {}))
    elif kind == "idempotency-space":
        if endpoint.route in IDEMPOTENT_ROUTES or "/recovery/" in endpoint.route:
            space = {"HTTP_IDEMPOTENCY_KEY": "two words"}
            cases.append(("Idempotency-Key", "Idempotency-Key 'two words'", ascii_json(body), space))
    elif kind == "wrong-type":
        for name, node in fields.items():
            if _kind(node) == "json":
                continue
            for value in _wrong_values(_kind(node)):
                cases.append((name, f"{name}: {exactjson.dumps(value)}", with_field(name, value), {}))
    return cases


API_CLASSES = [
    "oversized",
    "deep-100000",
    "deep-65",
    "huge-number",
    "surrogate",
    "hidden",
    "idempotency-space",
    "wrong-type",
]
# Classes whose refusal may name the limit broken instead of the field that broke it.
LIMIT_CLASSES = {"deep-100000", "deep-65", "huge-number"}


@pytest.fixture
def raw_api():
    """A client that answers a server error as a response instead of raising it: a 500 is an answer to count."""
    return APIClient(raise_request_exception=False)


SIGNAL_STEP = {"key": "approve", "kind": "SIGNAL", "name": "approved", "payload_version": "v1", "deadline_seconds": 600}


def _signal_instance(tenancy):
    """An instance the engine started, awaiting the signal the sweep's signal body sends: that body is accepted."""
    engine = Engine(*tenancy)
    return engine.start(engine.define([SIGNAL_STEP], deadline_seconds=86400))


# Only the pairs a class applies to (a field of its kind, an Idempotency-Key): read from the description.
API_MATRIX = [
    pytest.param(endpoint, kind, id=f"{endpoint.name}-{kind}")
    for endpoint in SEND_POSTS
    for kind in API_CLASSES
    if _api_cases(kind, endpoint, {}, _request_schemas()[_template(endpoint.route)])
]


@pytest.mark.parametrize(("endpoint", "kind"), API_MATRIX)
def test_every_class_of_bad_input_to_every_json_post_is_a_4xx_naming_it_and_writes_nothing(
    raw_api, tenancy, security_world, endpoint, kind
):
    token = _issue(security_world.namespace)
    path = endpoint.path(security_world)
    if endpoint.route.endswith("/signals"):
        path = endpoint.path(security_world, id=_signal_instance(tenancy).id)
    fields = _request_schemas()[_template(endpoint.route)]
    cases = _api_cases(kind, endpoint, endpoint.body(security_world), fields)
    before = history_digest()
    wrong = []
    for n, (field, what, text, headers) in enumerate(cases):
        headers = {"HTTP_IDEMPOTENCY_KEY": f"matrix-{n}"} | bearer(token) | headers
        response = raw_api.generic("POST", path, text, "application/json", **headers)
        answer = f"{response.status_code} {response.content[:200]!r}"
        if not 400 <= response.status_code < 500:
            wrong.append(f"{what} → {answer}")
            continue
        error = _envelope_error(response)
        named = (_whole_body_limit_or_field if kind in LIMIT_CLASSES else _names)(error, field)
        if not named or (kind == "oversized" and response.status_code != 413):
            wrong.append(f"{what} → {answer}")
    if history_digest() != before:
        wrong.append("a history table changed")
    assert wrong == [], "\n".join(wrong)


# ---- the same classes through the admin forms ----------------------------------------------------------------
#
# A form answers a refusal by showing the form again with the error on the field (or above the form, naming a
# hidden field); a 4xx is a refusal too. A form post is UTF-8 form-encoded, so a lone surrogate cannot be sent:
# that class is the JSON lane's only.

ADMIN = "/admin/history/workflowinstance/{id}/"
JSON_FORM_FIELDS = ("result", "payload")
REVISION_FORM_FIELDS = ("expected_revision", "expected_task_revision", "expected_step_revision")
TEXT_FORM_FIELDS = ("reason", "evidence_ref", "correlation_key", "name", "payload_version", "idempotency_key")


def _recovery_form(operation: str, build, make):
    def form(tenancy):
        state = make(tenancy)
        command = build(state)
        spec = RECOVERY_OPERATIONS[operation]
        data = {name: str(value) for name, value in command.items() if name not in (spec.declaration, "result")}
        if "result" in command:
            data["result"] = exactjson.dumps(command["result"])
        data |= {"declaration": "on", "idempotency_key": f"admin-fuzz-{operation}", "_confirm": "1"}
        return ADMIN.format(id=state.instance.id) + f"recovery/{operation}/", data

    return form


def _signal_form(tenancy):
    instance = _signal_instance(tenancy)
    data = {
        "target_step_key": SIGNAL_STEP["key"],
        "name": "approved",
        "payload_version": SIGNAL_STEP["payload_version"],
        "correlation_key": "o-1",
        "payload": '{"approved": true}',
        "reason": "finance approved",
        "evidence_ref": "ticket:OPS-1",
        "idempotency_key": "admin-fuzz-signal",
    }
    return ADMIN.format(id=instance.id) + "signal/", data


def _control_form(action: str):
    def form(tenancy):
        state = states.task_failed_state(tenancy)
        data = {"reason": "maintenance window", "expected_control_revision": str(state.instance.control_revision)}
        return ADMIN.format(id=state.instance.id) + f"control/{action}/", data

    return form


FORMS = {
    **{f"recovery/{name}": _recovery_form(name, build, make) for name, build, make in OPERATIONS},
    "signal": _signal_form,
    **{f"control/{action}": _control_form(action) for action in CONTROLS},
}


def test_the_form_matrix_covers_every_recovery_signal_and_control_form():
    assert set(FORMS) == {f"recovery/{n}" for n in RECOVERY_OPERATIONS} | {"signal"} | {
        f"control/{a}" for a in CONTROLS
    }


def _form_cases(kind: str, data: dict) -> list[tuple[str, str, dict]]:
    """(field to name, description, posted data) of one input class for one form."""
    cases = []
    present = [name for name in data if not name.startswith("_")]
    if kind == "oversized":
        cases.append(("reason", "reason: over the body limit", data | {"reason": "x" * (limits.max_body_bytes() + 1)}))
    elif kind in ("deep-100000", "deep-65"):
        depth = DEEP if kind == "deep-100000" else TOO_DEEP
        for name in JSON_FORM_FIELDS:
            if name in data:
                cases.append((name, f"{name} nested {depth} levels", data | {name: _nested_text(depth)}))
    elif kind == "huge-number":
        for name in present:
            if name in JSON_FORM_FIELDS:
                text = '{"paid": true, "approved": true, "amount": ' + HUGE_NUMBER + "}"
                cases.append((name, f"{name}: an object holding a 5000-digit number", data | {name: text}))
            if name in REVISION_FORM_FIELDS or name == "expected_control_revision":
                cases.append((name, f"{name}: a 5000-digit number", data | {name: str(HUGE_NUMBER)}))
    elif kind == "hidden":
        for name in present:
            if name in TEXT_FORM_FIELDS:
                for label, char in HIDDEN.items():
                    cases.append((name, f"{name}: {label}", data | {name: f"ok{char}ok"}))
    elif kind == "idempotency-space":
        if "idempotency_key" in data:
            cases.append(("idempotency_key", "idempotency_key 'two words'", data | {"idempotency_key": "two words"}))
    elif kind == "wrong-type":
        for name in present:
            if name in JSON_FORM_FIELDS:
                cases.append((name, f"{name}: not JSON", data | {name: "{not json"}))
            if name in (*REVISION_FORM_FIELDS, "expected_control_revision", "task_id", "activation_id"):
                cases.append((name, f"{name}: 'abc'", data | {name: "abc"}))
            if name == "conclusion":
                cases.append((name, "conclusion: 'MAYBE'", data | {name: "MAYBE"}))
    return cases


def _form_names(response, field: str) -> bool:
    """The form came back with an error on ``field``, or above the form naming it (a hidden field)."""
    form = response.context["form"] if response.context and "form" in response.context else None
    if form is None or not form.errors:
        return False
    # A hidden field is named in the message above the form, the header's spelling included (Idempotency-Key).
    spelled = (field, field.replace("_", "-").lower())
    return field in form.errors or any(
        name in str(error).lower() for error in form.non_field_errors() for name in spelled
    )


FORM_CLASSES = ["oversized", "deep-100000", "deep-65", "huge-number", "hidden", "idempotency-space", "wrong-type"]


@pytest.fixture
def operator_client(console_user, settings):
    """An operator (recover, control, signal) logged in, on a client that answers server errors as responses."""
    # The password is never used (force_login): a fast hasher keeps the matrix's setup short.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    client = Client(raise_request_exception=False)
    client.force_login(console_user("olga", "operators"))
    return client


def _form_fields(form: str) -> dict:
    """The names a form posts, as its class declares them (values do not decide which classes apply)."""
    kind, _, name = form.partition("/")
    declared = {
        "recovery": lambda: (
            recovery_form_class(RECOVERY_OPERATIONS.get(name, RECOVERY_OPERATIONS["continue"])).base_fields
        ),
        "signal": lambda: SignalForm.base_fields,
        "control": lambda: ControlForm.base_fields,
    }[kind]()
    return dict.fromkeys(declared, "")


FORM_MATRIX = [
    pytest.param(form, kind, id=f"{form}-{kind}")
    for form in sorted(FORMS)
    for kind in FORM_CLASSES
    if _form_cases(kind, _form_fields(form))
]


@pytest.mark.parametrize(("form", "kind"), FORM_MATRIX)
def test_every_class_of_bad_input_to_every_admin_form_is_refused_naming_it_and_writes_nothing(
    operator_client, tenancy, form, kind
):
    url, data = FORMS[form](tenancy)
    cases = _form_cases(kind, data)
    assert set(data) - {"_confirm", "declaration"} <= set(_form_fields(form)), "the matrix reads the form's fields"
    before = history_digest()
    wrong = []
    for n, (field, what, posted) in enumerate(cases):
        if field != "idempotency_key" and "idempotency_key" in posted:
            posted = posted | {"idempotency_key": f"{posted['idempotency_key']}-{n}"}
        response = operator_client.post(url, posted)
        refused = response.status_code in (400, 413) or (response.status_code == 200 and _form_names(response, field))
        if not refused:
            errors = (
                response.context["form"].errors.as_data() if response.context and "form" in response.context else ""
            )
            wrong.append(f"{what} → {response.status_code} {errors!r:.300}")
    if history_digest() != before:
        wrong.append("a history table changed")
    assert wrong == [], "\n".join(wrong)
