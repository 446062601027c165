"""`make serve` as a team runs it: the production profile behind a TLS proxy, JSON logs, on MariaDB.

One run of scripts/serve.sh in a copy of the tree (its var/ is its own) on a database of its own, reached through a
relay the test can cut. Through it: the static files load, an operator logs in, a recovery runs and the background
carries the instance to SUCCEEDED; a hung runner shows as stale while the server stays ready; a database outage
makes the server unready within the bound, keeps it alive, and the background resumes after it; SIGTERM stops every
process with status 0 and records each clean stop; every log line is one JSON object, a request's with its id.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

import MySQLdb
import pytest
from django.conf import settings
from django.db import connection

from tests.weave_site.test_static import static_assets

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 2
STALE_AFTER = 3
PROCESSES = ("web.1", "runner.1", "notify.1", "worker_tasks.1", "worker_polls.1", "metrics.1")
# honcho's prefix on each line a process writes: the time, the process, a bar.
PREFIXED = re.compile(r"^\d\d:\d\d:\d\d (?P<process>[\w.]+)\s*\| (?P<line>.*)$")

pytestmark = pytest.mark.skipif(connection.vendor != "mysql", reason="the production stack runs on MariaDB")


class TcpRelay:
    """A port that forwards to the database server until ``cut``: then every connection through it is closed, and
    new ones are accepted but never answered (a database gone silent) until ``mend``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.open = target, threading.Event()
        self.open.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.sockets.append(client)
            if self.open.is_set():
                server = socket.create_connection(self.target)
                with self.lock:
                    self.sockets.append(server)
                for source, sink in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open.clear()
        with self.lock:
            for end in self.sockets:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
            self.sockets.clear()

    def mend(self) -> None:
        self.cut()
        self.open.set()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut()


class Browser:
    """Requests as they reach gunicorn from the TLS proxy in front of it (which adds X-Forwarded-Proto), with the
    cookies a browser keeps: Django's are Secure here, which a cookie jar would not send over the proxy's plain hop."""

    def __init__(self, port: int) -> None:
        self.port, self.cookies = port, {}

    def request(self, method: str, path: str, *, body: bytes | None = None, headers: dict | None = None):
        conn = HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        response.body = response.read()
        conn.close()
        for header in response.headers.get_all("Set-Cookie") or []:
            name, value = header.split(";")[0].split("=", 1)
            self.cookies[name] = value
        return response

    def get(self, path: str, **headers):
        return self.request("GET", path, headers=headers)

    def api(self, method: str, path: str, token: str, payload: dict | None = None, **headers):
        headers |= {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        response = self.request(method, path, body=json.dumps(payload).encode() if payload else None, headers=headers)
        return response.status, json.loads(response.body)

    def post_form(self, path: str, fields: dict):
        referer = f"https://127.0.0.1:{self.port}{path}"
        form = urlencode({"csrfmiddlewaretoken": self.cookies["csrftoken"], **fields}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Referer": referer}
        return self.request("POST", path, body=form, headers=headers)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def _until(what: str, check: Callable[[], object], within: float, every: float = 0.2):
    """``check``'s first true answer within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(every)


@pytest.fixture
def database(worker_id):
    """A database of its own on the test server behind a relay; the relay and a connection to the server."""
    config = settings.DATABASES["default"]
    server = {"host": config["HOST"], "port": int(config["PORT"]), "user": config["USER"], "passwd": config["PASSWORD"]}
    name = f"weave_stack_{worker_id}"
    admin = MySQLdb.connect(**server, autocommit=True)
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    admin.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    relay = TcpRelay((config["HOST"], int(config["PORT"])))
    password = f":{config['PASSWORD']}" if config["PASSWORD"] else ""
    try:
        yield {"url": f"mysql://{config['USER']}{password}@127.0.0.1:{relay.port}/{name}", "name": name}, relay, admin
    finally:
        relay.close()
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@pytest.fixture
def tree(tmp_path):
    """The tree's files (committed or not, as git sees them) in a copy sharing the virtualenv."""
    copy = tmp_path / "weave"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


@pytest.fixture
def stack(tree, database):
    """scripts/serve.sh running in ``tree``; its output lines as they come, the ports, the database and relay."""
    db, relay, admin = database
    web, metrics = _free_port(), _free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tree),
        "WEAVE_PROFILE": "production",
        "WEAVE_SECRET_KEY": secrets.token_urlsafe(50),
        "WEAVE_ALLOWED_HOSTS": "127.0.0.1",
        "WEAVE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
        "WEAVE_DATABASE_URL": db["url"],
        "WEAVE_BIND": f"127.0.0.1:{web}",
        "WEAVE_METRICS_BIND": f"127.0.0.1:{metrics}",
        "WEB_CONCURRENCY": "2",
        "WEAVE_LOG_FORMAT": "json",
        "WEAVE_READY_TIMEOUT_SECONDS": str(READY_TIMEOUT),
        "WEAVE_HEARTBEAT_STALE_SECONDS": str(STALE_AFTER),
    }
    process = subprocess.Popen(
        ["bash", "scripts/serve.sh"],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        yield {
            "process": process,
            "lines": lines,
            "reader": reader,
            "web": web,
            "metrics": metrics,
            "db": db,
            "relay": relay,
            "admin": admin,
        }
    finally:
        _stop_all(process, lines)
        reader.join(timeout=10)
        print("".join(lines))  # shown when the test fails


def _stop_all(process: subprocess.Popen, lines: list[str]) -> None:
    """After a failure: honcho stops what it started (each process in a session of its own, which a kill of
    honcho's group would not reach), then anything left is killed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    for pid in re.findall(r"started \(pid=(\d+)\)", "".join(lines)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGKILL)


def test_the_stack_serves_recovers_reports_its_background_and_stops_cleanly(stack, tree):
    browser = Browser(stack["web"])
    _until("the server is ready", lambda: _ready(stack, browser), within=240, every=0.5)
    login = json.loads((tree / "var" / "demo_login.json").read_text())
    _log_in_and_load_the_assets(browser, login)
    _recover_poll_exhausted(browser, login["token"])
    _a_hung_runner_is_stale(browser, login["token"])
    _a_database_outage(stack, browser, login["token"])
    metrics = HTTPConnection("127.0.0.1", stack["metrics"], timeout=10)
    metrics.request("GET", "/metrics")
    exported = metrics.getresponse().read().decode()
    assert 'weave_http_request_duration_seconds_count{method="GET",route="readyz",status="503"}' in exported
    assert "weave_background_heartbeat_age_seconds{" in exported
    answered = browser.get("/readyz").headers["X-Request-Id"]
    by_process = _stop(stack)
    _logs(by_process, answered)
    checked = subprocess.run(
        [".venv/bin/python", "manage.py", "weave_check"],
        cwd=tree,
        env={"PATH": os.environ["PATH"], "WEAVE_DATABASE_URL": stack["db"]["url"], "WEAVE_SECRET_KEY": "k" * 50},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0 and "weave_check: clean" in checked.stdout, checked.stdout + checked.stderr


def _ready(stack, browser) -> bool:
    assert stack["process"].poll() is None, "".join(stack["lines"])
    try:
        return browser.get("/readyz").status == 200
    except OSError:
        return False


def _log_in_and_load_the_assets(browser: Browser, login: dict) -> None:
    """The proxy's header makes each request secure (no redirect, HSTS); the admin's, the console's and the API
    docs' assets load by their hashed names, with their types."""
    page = browser.get("/admin/login/")
    assert page.status == 200 and "max-age=" in page.headers["Strict-Transport-Security"]
    logged_in = browser.post_form(
        "/admin/login/?next=/admin/", {"username": login["admin_user"], "password": login["admin_password"]}
    )
    assert logged_in.status == 302 and logged_in.headers["Location"] == "/admin/", logged_in.body[:500]
    assets = set(static_assets(page.body))
    for path in ("/admin/", "/v1/docs/"):
        page = browser.get(path)
        assert page.status == 200, path
        assets |= set(static_assets(page.body))
    assert any(url.startswith("/static/console/") for url in assets)
    assert any("swagger-ui" in url for url in assets)
    types = {"css": "text/css", "js": "text/javascript"}
    assert set(types) <= {url.rsplit(".", 1)[1] for url in assets}
    for url in assets:
        answer = browser.get(url)
        assert answer.status == 200, url
        wanted = types.get(url.rsplit(".", 1)[1])
        assert wanted is None or answer.headers["Content-Type"].startswith(wanted), (url, answer.headers)


def _recover_poll_exhausted(browser: Browser, token: str) -> None:
    """ResolveStep and Continue through the API; the runner under honcho carries the instance to SUCCEEDED."""
    status, found = browser.api("GET", "/v1/workflows?business_key=poll_exhausted", token)
    assert status == 200, found
    path = f"/v1/workflows/{found['data']['items'][0]['id']}"
    detail = browser.api("GET", path, token)[1]["data"]
    step = next(s for s in detail["steps"] if s["key"] == "settle")
    command = {"reason": "the transfer settled (bank statement)", "evidence_ref": "ticket:OPS-7"}
    status, resolved = browser.api(
        "POST",
        f"{path}/recovery/resolve-step",
        token,
        command
        | {
            "expected_revision": detail["revision"],
            "step_key": "settle",
            "activation_id": step["current_activation_id"],
            "expected_step_revision": step["revision"],
            "execution_settled": True,
            "conclusion": "SUCCEEDED",
            "result": {"status": "done"},
        },
        **{"Idempotency-Key": "stack-resolve"},
    )
    assert status == 200, resolved
    revision = browser.api("GET", path, token)[1]["data"]["revision"]
    status, continued = browser.api(
        "POST",
        f"{path}/recovery/continue",
        token,
        command | {"expected_revision": revision, "review_resolved": True},
        **{"Idempotency-Key": "stack-continue"},
    )
    assert status == 200, continued
    _until(
        "the instance SUCCEEDED",
        lambda: browser.api("GET", path, token)[1]["data"]["state"] == "SUCCEEDED",
        within=30,
    )


def _background(browser: Browser, token: str) -> dict:
    status, answer = browser.api("GET", "/v1/background", token)
    assert status == 200, answer
    return answer["data"]


def _all_beating(browser: Browser, token: str) -> bool:
    return _background(browser, token)["summary"] == {"runners_alive": 1, "workers_alive": 2, "stale": 0}


def _a_hung_runner_is_stale(browser: Browser, token: str) -> None:
    """A runner stopped with its connection open shows as stale in the API and on the console's home page, while
    the server stays ready: readiness is about this process and its database, not the background."""
    _until("every process beats", lambda: _all_beating(browser, token), within=10)
    runner = next(p for p in _background(browser, token)["processes"] if p["kind"] == "runner")
    os.kill(runner["pid"], signal.SIGSTOP)
    try:
        _until(
            "the runner is stale",
            lambda: any(p["id"] == runner["id"] and p["stale"] for p in _background(browser, token)["processes"]),
            within=STALE_AFTER + 5,
        )
        assert _background(browser, token)["summary"]["runners_alive"] == 0
        assert 'data-warning="stale"' in browser.get("/admin/").body.decode()
        assert browser.get("/readyz").status == 200
    finally:
        os.kill(runner["pid"], signal.SIGCONT)
    _until("the runner beats again", lambda: _all_beating(browser, token), within=STALE_AFTER + 5)


def _a_database_outage(stack, browser: Browser, token: str) -> None:
    """The database goes silent: the server answers unready within the bound and stays alive, and so does the
    background, which takes its passes again once the database is back."""
    last_beat = max(p["beat_at"] for p in _background(browser, token)["processes"])
    stack["relay"].cut()
    started = time.monotonic()
    unready = browser.get("/readyz")
    assert unready.status == 503 and time.monotonic() - started < READY_TIMEOUT + 2, unready.body
    assert json.loads(unready.body)["error"]["message"] == "not ready: database"
    assert browser.get("/healthz").status == 200
    time.sleep(READY_TIMEOUT + 1)
    assert stack["process"].poll() is None and browser.get("/healthz").status == 200
    stack["relay"].mend()
    _until("the server is ready again", lambda: _ready(stack, browser), within=10)

    def resumed() -> bool:
        beats = [p["beat_at"] for p in _background(browser, token)["processes"] if "stopped_at" not in p]
        return _all_beating(browser, token) and min(beats) > last_beat

    _until("every background process beats again", resumed, within=30)


def _stop(stack) -> dict[str, list[str]]:
    """SIGTERM, as systemd and Ctrl-C send it: every process stops by itself with status 0, its stop recorded.
    Returns what each process wrote, honcho's prefix taken off."""
    # honcho prints from its SIGTERM handler: a signal that lands while it prints a line (the last request's) ends
    # its loop with "reentrant call inside <stdout>" and leaves the processes running. The signal waits for quiet.
    time.sleep(1)
    stack["process"].send_signal(signal.SIGTERM)
    assert stack["process"].wait(timeout=30) == 128 + signal.SIGTERM  # honcho's own status names what stopped it
    stack["reader"].join(timeout=10)
    by_process: dict[str, list[str]] = {}
    for match in filter(None, (PREFIXED.match(line.rstrip("\n")) for line in stack["lines"])):
        by_process.setdefault(match["process"], []).append(match["line"])
    stopped = sorted(line for line in by_process["system"] if "stopped" in line)
    assert stopped == sorted(f"{name} stopped (rc=0)" for name in PROCESSES)
    cursor = stack["admin"].cursor()
    cursor.execute(f"SELECT kind, queue, stopped_at IS NOT NULL FROM {stack['db']['name']}.history_backgroundprocess")
    # One row per background process of the run (the demo's seeding starts none), each with its stop.
    rows = sorted(cursor.fetchall())
    expected = [("notifier", "", 1), ("runner", "", 1), ("worker", "demo-polls", 1), ("worker", "demo-tasks", 1)]
    assert rows == expected, rows
    return by_process


def _logs(by_process: dict[str, list[str]], request_id: str) -> None:
    """Every line the processes wrote is one JSON object; a request's carries its id, a runner pass's its own, and
    each background process logged the outage as a warning, not an exit."""
    records = {name: [json.loads(line) for line in by_process[name]] for name in PROCESSES if name != "metrics.1"}
    requests = [r for r in records["web.1"] if r["logger"] == "weave.http"]
    assert any(r["request_id"] == request_id and r["route"] == "readyz" and r["status"] == 200 for r in requests)
    assert all(re.fullmatch(r"[0-9a-f]{32}", r["request_id"]) for r in requests)
    passes = [r for r in records["runner.1"] if r["message"].startswith("runner pass:")]
    assert passes and all(re.fullmatch(r"[0-9a-f]{32}", r["pass_id"]) for r in passes)
    for name in ("runner.1", "notify.1", "worker_tasks.1", "worker_polls.1"):
        assert any(r["level"] == "WARNING" and "database error" in r["message"] for r in records[name]), name
