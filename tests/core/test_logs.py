"""Log lines say whose work they are about: a request's carry its id, a background pass's one id of its own."""

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from core.logs import json_formatter, log_context
from engine import runner
from engine.incidents import Item, isolated
from engine.management.commands import weave_worker

ROOT = Path(__file__).resolve().parents[2]
JSON_KEYS = {"timestamp", "level", "logger", "message"}


@pytest.fixture
def json_lines():
    """The lines the settings' console handler writes from now on, as JSON objects."""
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    stream, formatter = io.StringIO(), handler.formatter
    previous = handler.setStream(stream)
    handler.setFormatter(json_formatter())
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        handler.setStream(previous)
        handler.setFormatter(formatter)


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh process with the product settings, this run's key and ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("WEAVE_LOG_FORMAT", "WEAVE_LOG_LEVEL")}
    clean |= {"DJANGO_SETTINGS_MODULE": "weave_site.settings", **env}
    return subprocess.run(
        [sys.executable, *code], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60, check=False
    )


LOG_TWO_LINES = (
    "-c",
    "import django, logging; django.setup()\n"
    "from core.logs import log_context\n"
    "log = logging.getLogger('weave.background')\n"
    "with log_context(pass_id='a' * 32, namespace='b' * 32, instance='c' * 32):\n"
    "    log.warning('inbox: %s record(s) set aside', 2)\n"
    "log.error('runner: database error (OperationalError); retrying in 1 s')\n",
)


def test_a_requests_log_lines_carry_the_request_id_it_answers_with(client, json_lines):
    response = client.get("/v1/workflows")
    assert response.status_code == 401
    lines = json_lines()
    # The access line, and Django's own line for the 4xx answer (logged after the middleware has returned).
    assert {line["logger"] for line in lines} == {"weave.http", "django.request"}
    assert {line["request_id"] for line in lines} == {response["X-Request-Id"]}
    (access,) = [line for line in lines if line["logger"] == "weave.http"]
    assert access["method"] == "GET" and access["route"] == "v1/workflows" and access["status"] == 401
    assert access["duration_ms"] >= 0
    assert access["message"].startswith("GET v1/workflows 401 ")
    assert access["message"].endswith(f"ms request_id={response['X-Request-Id']}")


def test_two_requests_log_two_request_ids(client, json_lines):
    client.get("/v1/workflows")
    client.get("/nowhere")
    ids = [line["request_id"] for line in json_lines() if line["logger"] == "weave.http"]
    assert len(ids) == 2 and ids[0] != ids[1]


def test_a_runner_passs_lines_carry_one_pass_id_and_the_next_pass_another(monkeypatch, json_lines):
    def busy() -> int:
        logging.getLogger("weave.background").warning("busy: one item")
        return 1

    def broken() -> int:
        raise ValueError("a candidate query failed")

    monkeypatch.setattr(runner, "PASSES", {"busy": busy, "broken": broken})
    runner.runner_pass()
    runner.runner_pass()
    lines = json_lines()
    assert [line["message"] for line in lines] == [
        "busy: one item",
        "broken: the pass failed with ValueError; the other passes go on",
        "runner pass: busy=1",  # what the pass handled, closing its lines
    ] * 2
    first, second = {line["pass_id"] for line in lines[:3]}, {line["pass_id"] for line in lines[3:]}
    assert len(first) == 1 and len(second) == 1 and first != second


def test_an_item_set_aside_is_logged_with_its_instance_inside_the_pass(db, json_lines):
    def poisoned() -> int:
        raise ValueError("unreadable input")

    with log_context(pass_id="p" * 32):
        isolated(Item("timers", "wait", "w" * 32, "i" * 32), poisoned)
    (line,) = [line for line in json_lines() if "incident" in line["message"]]
    assert line["instance"] == "i" * 32 and line["pass_id"] == "p" * 32
    assert line["level"] == "ERROR" and line["logger"] == "weave.background"


def test_each_claim_of_a_worker_is_a_pass_of_its_namespace(tenancy, monkeypatch, json_lines):
    def claim_nothing(**_) -> list:
        logging.getLogger("weave.background").warning("claiming")
        return []

    monkeypatch.setattr(weave_worker, "task_claim_batch", claim_nothing)
    call_command("weave_worker", "--queue", "payments", "--once", stdout=io.StringIO())
    call_command("weave_worker", "--queue", "payments", "--once", stdout=io.StringIO())
    lines = [line for line in json_lines() if line["message"] == "claiming"]
    assert [line["namespace"] for line in lines] == [tenancy[0].id] * 2
    assert lines[0]["pass_id"] != lines[1]["pass_id"]


def test_the_fields_bound_by_a_block_are_dropped_when_it_ends(json_lines):
    log = logging.getLogger("weave.background")
    with log_context(pass_id="p" * 32):
        with log_context(instance="i" * 32):
            log.warning("inner")
        log.warning("outer")
    log.warning("outside")
    inner, outer, outside = json_lines()
    assert (inner["pass_id"], inner["instance"]) == ("p" * 32, "i" * 32)
    assert outer["pass_id"] == "p" * 32 and "instance" not in outer
    assert "pass_id" not in outside


def test_json_format_writes_one_object_per_line_with_its_keys():
    done = _run_python(LOG_TWO_LINES, WEAVE_LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    bound, bare = [json.loads(line) for line in done.stderr.splitlines()]
    assert bound.keys() == JSON_KEYS | {"pass_id", "namespace", "instance"}
    assert bound["message"] == "inbox: 2 record(s) set aside"
    assert (bound["level"], bound["logger"]) == ("WARNING", "weave.background")
    assert (bound["pass_id"], bound["namespace"], bound["instance"]) == ("a" * 32, "b" * 32, "c" * 32)
    assert bound["timestamp"].endswith("+00:00")
    assert bare.keys() == JSON_KEYS and bare["level"] == "ERROR"


def test_plain_format_writes_the_message_alone_as_before():
    done = _run_python(LOG_TWO_LINES)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "inbox: 2 record(s) set aside",
        "runner: database error (OperationalError); retrying in 1 s",
    ]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("WEAVE_LOG_FORMAT", "xml", "WEAVE_LOG_FORMAT: 'xml' is not a log format; use 'json' or 'plain' (unset)"),
        ("WEAVE_LOG_LEVEL", "loud", "WEAVE_LOG_LEVEL: 'loud' is not a level"),
    ],
)
def test_a_bad_log_setting_stops_the_process_naming_it(variable, value, message):
    done = _run_python(("manage.py", "check"), **{variable: value})
    assert done.returncode != 0
    assert done.stderr.startswith(f"manage.py: {message}")
    assert len(done.stderr.splitlines()) == 1
