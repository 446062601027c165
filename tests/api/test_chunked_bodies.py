"""A request body sent chunked (no Content-Length) is read within the body limit or refused, never taken as empty.

Django reads only a declared length; ``api.parsing.chunked_bodies_read`` (the WSGI application of
``weave_site.wsgi``) gives it one where the server ends the chunked input itself, and
``api.parsing.LengthRequiredMiddleware`` refuses it (411) where no one did. Over gunicorn, in process with the
environ gunicorn hands over, with one the development server hands over, and under ASGI.
"""

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import httpx
import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.asgi import get_asgi_application
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection
from django.test import override_settings

from history.models import Note, Scope
from testkit import states
from tests.recovery.digest import history_digest
from tests.reliability.load import database_url
from weave_site.wsgi import application

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 4096


def _note(text: str) -> bytes:
    return json.dumps({"text": text}).encode()


@pytest.fixture
def review(tenancy) -> str:
    """The id of an instance in review."""
    return states.task_unknown_state(tenancy).instance.id


@pytest.fixture
def annotator(issue_token):
    return issue_token(scopes=[Scope.ANNOTATE, Scope.READ]).token


# ---- in process: the environ a WSGI server hands over ----------------------------------------------------------


@pytest.fixture
def in_process_connection():
    """Keep the test's connection (and its transaction) across WSGI requests, as Django's test client does."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def _chunked(path: str, body: io.BytesIO, token: str, *, terminated: bool = True, key: str = "k-1") -> tuple:
    """POST ``body`` as gunicorn hands a chunked one over (no CONTENT_LENGTH; ``terminated``: it ends the input)."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "CONTENT_TYPE": "application/json",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "HTTP_IDEMPOTENCY_KEY": key,
        "wsgi.input": body,
    }
    setup_testing_defaults(environ)
    if terminated:
        environ["wsgi.input_terminated"] = True
    answer = {}

    def start_response(status, headers):
        answer.update(status=int(status.split()[0]), headers=dict(headers))

    chunks = application(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return answer["status"], answer["headers"], json.loads(content)


def test_a_chunked_body_is_read_and_parsed_not_taken_as_empty(review, annotator, in_process_connection):
    instance_id = review
    status, _, answer = _chunked(f"/v1/workflows/{instance_id}/notes", io.BytesIO(_note("sent chunked")), annotator)
    assert (status, answer["data"]["text"]) == (201, "sent chunked")
    # An empty body is a valid acknowledgement: a field in the chunked body must be seen, and refused.
    before = history_digest()
    status, _, answer = _chunked(f"/v1/workflows/{instance_id}/acknowledge", io.BytesIO(b'{"x": 1}'), annotator)
    assert (status, answer["error"]["field"]) == (400, "x")
    assert history_digest() == before


@override_settings(WEAVE_MAX_BODY_BYTES=LIMIT)
def test_a_chunked_body_over_the_limit_is_413_naming_it_and_read_one_byte_past_it(
    review, annotator, in_process_connection
):
    instance_id = review
    text = _note("at the limit")
    at_limit = text[:-1] + b" " * (LIMIT - len(text)) + b"}"  # the same note, padded to the limit
    assert len(at_limit) == LIMIT
    status, _, _ = _chunked(f"/v1/workflows/{instance_id}/notes", io.BytesIO(at_limit), annotator)
    assert status == 201
    before = history_digest()
    body = io.BytesIO(_note("x" * 100_000))
    status, _, answer = _chunked(f"/v1/workflows/{instance_id}/notes", body, annotator, key="k-2")
    assert status == 413 and answer["error"]["code"] == "INVALID_ARGUMENT" and answer["error"]["field"] == "body"
    assert str(LIMIT) in answer["error"]["message"] and "WEAVE_MAX_BODY_BYTES" in answer["error"]["message"]
    assert body.tell() == LIMIT + 1
    assert history_digest() == before


LENGTH_REQUIRED = {
    "code": "INVALID_ARGUMENT",
    "message": "body must be sent with Content-Length (at most 1048576 bytes, WEAVE_MAX_BODY_BYTES): this server "
    "cannot read a chunked body",
    "field": "body",
}


def test_a_server_that_cannot_end_a_chunked_body_answers_411_naming_the_limit_unread(
    review, annotator, in_process_connection
):
    instance_id = review
    before = history_digest()
    body = io.BytesIO(_note("never read"))
    status, headers, answer = _chunked(f"/v1/workflows/{instance_id}/notes", body, annotator, terminated=False)
    assert (status, answer["error"]) == (411, LENGTH_REQUIRED)
    assert headers["X-Request-Id"] == answer["request_id"] and len(answer["request_id"]) == 32
    assert headers["Content-Type"] == "application/json"
    assert body.tell() == 0 and history_digest() == before


def test_under_asgi_a_chunked_body_is_411_not_taken_as_empty():
    """Django's ASGI request has no length without Content-Length either: an empty acknowledgement would pass."""
    path = f"/v1/workflows/{'e' * 32}/acknowledge"
    headers = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"", "headers": headers}

    async def post() -> list[dict]:
        communicator = ApplicationCommunicator(get_asgi_application(), scope)
        await communicator.send_input({"type": "http.request", "body": b'{"x": 1}', "more_body": False})
        return [await communicator.receive_output(10), await communicator.receive_output(10)]

    # A thread of its own: a browser test's Playwright keeps an event loop running in this worker's main thread.
    with ThreadPoolExecutor(1) as thread:
        start, body = thread.submit(asyncio.run, post()).result()
    answer = json.loads(body["body"])
    assert (start["status"], answer["error"]) == (411, LENGTH_REQUIRED)
    assert dict(start["headers"])[b"X-Request-Id"] == answer["request_id"].encode()


# ---- over gunicorn ----------------------------------------------------------------------------------------------


@pytest.fixture
def gunicorn_url():
    """gunicorn serving weave_site.wsgi on this test's database, with a body limit of LIMIT bytes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "WEAVE_DATABASE_URL": database_url(), "WEAVE_MAX_BODY_BYTES": str(LIMIT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "weave_site.wsgi:application", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/v1/openapi.json", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _chunks(body: bytes, size: int = 1000):
    """The body as an iterator of unknown length: httpx sends it chunked, without Content-Length."""
    yield from (body[i : i + size] for i in range(0, len(body), size))


@pytest.mark.skipif(connection.vendor != "mysql", reason="other processes cannot open SQLite's test database")
@pytest.mark.django_db(transaction=True)
def test_gunicorn_reads_a_chunked_body_within_the_limit_and_refuses_one_over_it(review, annotator, gunicorn_url):
    instance_id = review
    headers = {"Authorization": f"Bearer {annotator}", "Content-Type": "application/json"}
    path = f"{gunicorn_url}/v1/workflows/{instance_id}/notes"
    sent = httpx.post(path, content=_chunks(_note("sent chunked")), headers=headers | {"Idempotency-Key": "g-1"})
    assert sent.request.headers["Transfer-Encoding"] == "chunked" and "Content-Length" not in sent.request.headers
    assert (sent.status_code, sent.json()["data"]["text"]) == (201, "sent chunked")
    over = httpx.post(path, content=_chunks(_note("x" * 3 * LIMIT)), headers=headers | {"Idempotency-Key": "g-2"})
    error = over.json()["error"]
    assert (over.status_code, error["code"], error["field"]) == (413, "INVALID_ARGUMENT", "body")
    assert str(LIMIT) in error["message"] and "WEAVE_MAX_BODY_BYTES" in error["message"]
    assert list(Note.objects.filter(workflow_id=instance_id).values_list("text", flat=True)) == ["sent chunked"]
