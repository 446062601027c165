"""The probes (GET /healthz, GET /readyz) and the background's status (GET /v1/background).

The probes answer without a token and touch nothing: /healthz reads nothing at all, /readyz only asks the
database, and neither writes, opens a session or sets a cookie. With the database down, /readyz answers 503
naming it while /healthz still answers 200.
"""

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db.migrations.recorder import MigrationRecorder
from rest_framework.test import APIClient

from core import clock
from core import readiness as readiness_module
from history.background import background_process_beat, background_process_start
from history.models import BackgroundProcess, ProcessKind, Scope
from tests.conftest import bearer
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def _data(response) -> dict:
    return json.loads(response.content)["data"]


def test_healthz_answers_200_without_a_query_a_session_or_a_cookie(api, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = api.get("/healthz", **bearer("not a token at all"))
        head = api.head("/healthz")
    assert (response.status_code, _data(response), head.status_code) == (200, {"alive": True}, 200)
    assert not response.cookies and "Set-Cookie" not in response


def test_a_probe_from_a_signed_in_browser_never_reads_its_session(
    client, console_user, django_assert_num_queries, django_assert_max_num_queries
):
    """A session cookie must not make a probe ask the database (which may be the thing that is down)."""
    client.force_login(console_user("ops", "operators"))
    with django_assert_num_queries(0):
        assert client.get("/healthz").status_code == 200
    with django_assert_max_num_queries(10) as ready:
        assert client.get("/readyz").status_code == 200
    assert not any("session" in query["sql"] for query in ready.captured_queries)


def test_readyz_lists_its_checks_and_writes_nothing(api, monkeypatch):
    monkeypatch.setattr(readiness_module, "_migrated", False)
    before = history_digest()
    response = api.get("/readyz", **bearer("not a token at all"))
    assert response.status_code == 200
    data = _data(response)
    assert data["ready"] is True and [c["name"] for c in data["checks"]][:2] == ["database", "migrations"]
    assert all(check["ok"] for check in data["checks"])
    assert history_digest() == before and not response.cookies
    assert api.post("/readyz").status_code == 405  # no command, and no CSRF check to pass


def test_readyz_answers_503_naming_an_unapplied_migration(api, monkeypatch):
    monkeypatch.setattr(readiness_module, "_migrated", False)
    MigrationRecorder.Migration.objects.filter(app="history").order_by("-id").first().delete()
    response = api.get("/readyz")
    assert response.status_code == 503
    error = json.loads(response.content)["error"]
    assert (error["code"], error["message"]) == ("UNAVAILABLE", "not ready: migrations")
    assert [(c["name"], c["ok"]) for c in error["checks"]][:2] == [("database", True), ("migrations", False)]


def test_with_the_database_down_readyz_answers_503_naming_it_and_healthz_still_200():
    """A server whose database URL names a closed port, as a process of its own."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {name: value for name, value in os.environ.items() if not name.startswith(("WEAVE_DATABASE", "DJANGO_"))}
    env |= {
        "WEAVE_DATABASE_URL": f"mysql://root@127.0.0.1:{port}/weave",
        "DJANGO_SETTINGS_MODULE": "weave_site.settings",
    }
    script = (
        "import json, django; django.setup(); from django.test import Client; client = Client(HTTP_HOST='localhost'); "
        "print(json.dumps({p: [r.status_code, json.loads(r.content)] for p in ('/healthz', '/readyz') "
        "for r in [client.get(p)]}))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.splitlines()[-1])
    assert answers["/healthz"] == [200, {"request_id": answers["/healthz"][1]["request_id"], "data": {"alive": True}}]
    status, body = answers["/readyz"]
    assert (status, body["error"]["message"]) == (503, "not ready: database")
    assert [(c["name"], c["ok"]) for c in body["error"]["checks"]] == [("database", False)]


# ---- GET /v1/background --------------------------------------------------------------------------


def _started(kind=ProcessKind.RUNNER, **fields) -> BackgroundProcess:
    row = BackgroundProcess(kind=kind, host="node-1", pid=fields.pop("pid", 100), **fields)
    background_process_start(process=row)
    return row


def test_the_background_answers_its_processes_and_their_summary(api, issue_token, tenancy, settings):
    settings.WEAVE_HEARTBEAT_STALE_SECONDS = 30
    runner = _started(passes=4, items=9)
    worker = _started(ProcessKind.WORKER, pid=101, queue="payments", namespace=tenancy[0])
    stopped = _started(pid=102)
    stopped.stopped_at = clock.now()
    background_process_beat(process=stopped)
    with clock.moved(dt.timedelta(seconds=45)):
        runner.beat_at = clock.now()
        background_process_beat(process=runner)
        response = api.get("/v1/background", **bearer(issue_token(scopes=[Scope.READ]).token))
    assert response.status_code == 200
    data = _data(response)
    assert [p["id"] for p in data["processes"]] == [runner.id, stopped.id, worker.id]
    first = data["processes"][0]
    assert first["kind"] == "runner" and first["host"] == "node-1" and first["pid"] == 100 and "queue" not in first
    assert (first["passes"], first["items"], first["age_seconds"], first["stale"]) == (4, 9, 0, False)
    assert "stopped_at" in data["processes"][1] and not data["processes"][1]["stale"]
    assert data["processes"][2]["queue"] == "payments" and data["processes"][2]["stale"] is True
    assert data["processes"][2]["age_seconds"] >= 45 and "stopped_at" not in data["processes"][2]
    assert data["summary"] == {"runners_alive": 1, "workers_alive": 0, "stale": 1}
    assert data["stale_after_seconds"] == 30


def test_the_background_needs_a_token_with_workflows_read_and_takes_no_parameter(api, issue_token):
    assert api.get("/v1/background").status_code == 401
    assert api.get("/v1/background", **bearer(issue_token(scopes=[Scope.CONTROL]).token)).status_code == 403
    reader = bearer(issue_token(scopes=[Scope.READ]).token)
    refused = json.loads(api.get("/v1/background?limit=5", **reader).content)["error"]
    assert (refused["code"], refused["field"]) == ("INVALID_ARGUMENT", "limit")


def test_the_probes_answer_over_plain_http_where_everything_else_is_redirected_to_https(settings):
    settings.SECURE_SSL_REDIRECT = True  # as under the production profile
    api = APIClient()
    assert api.get("/healthz").status_code == 200 and api.get("/readyz").status_code == 200
    assert api.get("/v1/background").status_code == 301 and api.get("/admin/").status_code == 301
