"""Secure defaults: no built-in key, the production profile, security headers, the admin login throttle."""

import datetime as dt
import json
import os
import re
import runpy
import secrets
import socket
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import httpx
import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from history.models import Scope
from testkit.states import task_unknown_state
from tests.conftest import bearer

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = secrets.token_urlsafe(50)


def _run(*command: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """``command`` in a fresh process whose environment has none of the test run's Weave/Django settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WEAVE_", "DJANGO_"))}
    clean |= {"DJANGO_SETTINGS_MODULE": "weave_site.settings", **env}
    return subprocess.run(
        list(command), cwd=ROOT, env=clean, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return _run(sys.executable, "manage.py", *args, **env)


def _settings_under(monkeypatch, **env: str) -> dict:
    """The product settings as a process whose environment holds ``env`` and no other Weave variable reads them."""
    for name in [name for name in os.environ if name.startswith("WEAVE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "weave_site" / "settings.py"))


PRODUCTION = {"WEAVE_PROFILE": "production", "WEAVE_ALLOWED_HOSTS": "weave.example.com", "WEAVE_SECRET_KEY": STRONG_KEY}


# ---- no built-in key -------------------------------------------------------------------


def test_a_command_refuses_to_start_without_a_secret_key():
    done = _manage("check")
    assert done.returncode != 0
    assert "WEAVE_SECRET_KEY is not set" in done.stderr
    assert _manage("check", WEAVE_SECRET_KEY=STRONG_KEY).returncode == 0


def test_the_wsgi_server_refuses_to_start_without_a_secret_key():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = [sys.executable, "-m", "gunicorn", "weave_site.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    done = _run(*server, "--workers", "1", "--graceful-timeout", "1")
    assert done.returncode != 0
    assert "WEAVE_SECRET_KEY is not set" in done.stderr


def test_a_server_the_tests_start_inherits_the_run_key():
    """The subprocesses the suite starts (gunicorn in tests/reliability/load.py) get the test run's key."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "weave_site.wsgi:application", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/admin/login/", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        assert answer.status_code == 200
        assert "Content-Security-Policy" in answer.headers
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_without_a_key_help_answers_and_every_command_refuses_in_one_line():
    for args in (("help",), ("--help",), ("--version",)):
        done = _manage(*args)
        assert (done.returncode, done.stderr) == (0, ""), args
    assert "Available subcommands" in _manage("help").stdout
    for args in (("check",), ("help", "migrate"), ("weave_check",)):
        done = _manage(*args)
        assert done.returncode == 1, args
        [line] = done.stderr.splitlines()
        assert line.startswith("manage.py: WEAVE_SECRET_KEY is not set: export a random key"), args


INTEGERS = {
    "WEAVE_MAX_BODY_BYTES": "WEAVE_MAX_BODY_BYTES",
    "WEAVE_MAX_JSON_BYTES": "WEAVE_MAX_JSON_BYTES",
    "WEAVE_PROPOSAL_TTL_SECONDS": "WEAVE_PROPOSAL_TTL_SECONDS",
    "WEAVE_LOGIN_FAILURE_LIMIT": "AXES_FAILURE_LIMIT",
    "WEAVE_LOGIN_COOLOFF_MINUTES": "AXES_COOLOFF_TIME",
    "WEAVE_HSTS_SECONDS": "SECURE_HSTS_SECONDS",
    "WEAVE_READY_TIMEOUT_SECONDS": "WEAVE_READY_TIMEOUT_SECONDS",
    "WEAVE_HEARTBEAT_STALE_SECONDS": "WEAVE_HEARTBEAT_STALE_SECONDS",
}


@pytest.mark.parametrize("variable", INTEGERS)
@pytest.mark.parametrize("bad", ["1MB", "0", "-5", "2.5", "١٢"])
def test_an_integer_setting_that_is_not_a_positive_whole_number_is_refused_naming_it(monkeypatch, variable, bad):
    with pytest.raises(ImproperlyConfigured, match=f"^{variable}: {re.escape(repr(bad))} is not a positive whole"):
        _settings_under(monkeypatch, **PRODUCTION, **{variable: bad})


def test_an_integer_setting_is_taken_as_given_and_its_default_when_unset_or_empty(monkeypatch):
    given = _settings_under(monkeypatch, **PRODUCTION, **dict.fromkeys(INTEGERS, " 7 "))
    assert [given[name] for name in INTEGERS.values()] == [7, 7, 7, 7, dt.timedelta(minutes=7), 7, 7, 7]
    defaults = _settings_under(monkeypatch, **PRODUCTION, **dict.fromkeys(INTEGERS, ""))
    assert defaults["WEAVE_MAX_BODY_BYTES"] == 1024 * 1024 and defaults["AXES_FAILURE_LIMIT"] == 5


def test_the_connection_age_may_be_zero_is_kept_a_minute_unset_and_is_refused_naming_it_when_not_whole(monkeypatch):
    def database(**env: str) -> dict:
        return _settings_under(monkeypatch, **PRODUCTION, **env)["DATABASES"]["default"]

    assert (database()["CONN_MAX_AGE"], database()["CONN_HEALTH_CHECKS"]) == (60, True)
    assert [database(WEAVE_DB_CONN_MAX_AGE=text)["CONN_MAX_AGE"] for text in ("0", " 300 ", "")] == [0, 300, 60]
    for bad in ("-1", "1m", "0.5"):
        with pytest.raises(ImproperlyConfigured, match=f"^WEAVE_DB_CONN_MAX_AGE: {re.escape(repr(bad))} is not a "):
            database(WEAVE_DB_CONN_MAX_AGE=bad)


def test_a_bad_integer_setting_stops_a_command_with_one_line():
    done = _manage("check", WEAVE_SECRET_KEY=STRONG_KEY, WEAVE_MAX_BODY_BYTES="1MB")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "manage.py: WEAVE_MAX_BODY_BYTES: '1MB' is not a positive whole number (unset, it is 1048576)"
    ]


def test_after_a_key_rotation_the_old_keys_sessions_and_cursors_hold_while_it_is_a_fallback(
    monkeypatch, settings, api, tenancy, issue_token
):
    old, new = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    task_unknown_state(tenancy), task_unknown_state(tenancy)
    reader = bearer(issue_token(scopes=[Scope.READ]).token)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = old, []
    user = User.objects.create_user("olga", password="pw", is_staff=True)
    kept, dropped = Client(), Client()
    for browser in (kept, dropped):
        browser.force_login(user)
        assert browser.get("/admin/").status_code == 200
    cursor = api.get("/v1/workflows?limit=1", **reader).json()["data"]["next_cursor"]

    def restart(**env: str) -> None:
        """The settings a process started with ``env`` and the new key reads."""
        loaded = _settings_under(monkeypatch, WEAVE_SECRET_KEY=new, **env)
        settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = loaded["SECRET_KEY"], loaded["SECRET_KEY_FALLBACKS"]

    restart(WEAVE_SECRET_KEY_FALLBACKS=f" {secrets.token_urlsafe(50)}, {old} ")
    assert (settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS[1]) == (new, old)
    assert api.get(f"/v1/workflows?limit=1&cursor={cursor}", **reader).status_code == 200
    assert kept.get("/admin/").status_code == 200

    restart()
    assert settings.SECRET_KEY_FALLBACKS == []
    refused = api.get(f"/v1/workflows?limit=1&cursor={cursor}", **reader)
    assert (refused.status_code, refused.json()["error"]["field"]) == (400, "cursor")
    assert dropped.get("/admin/")["Location"].startswith("/admin/login/")


def test_the_settings_module_holds_no_key():
    source = (ROOT / "weave_site" / "settings.py").read_text()
    assert re.search(r"SECRET_KEY\s*=\s*os\.environ\.get\(\"WEAVE_SECRET_KEY\",\s*\"\"\)", source)
    assert re.findall(r"SECRET_KEY\s*=", source) == ["SECRET_KEY ="]


# ---- the production profile ----------------------------------------------------------------


def test_check_deploy_is_clean_under_the_production_profile():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_check_deploy_is_clean_behind_a_tls_terminating_proxy():
    proxied = PRODUCTION | {"WEAVE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https"}
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **proxied)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = _manage(
        "shell", "-v", "0", "-c", "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)", **proxied
    )
    assert shown.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')"


def test_check_deploy_warns_outside_the_production_profile():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", WEAVE_SECRET_KEY=STRONG_KEY)
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"WEAVE_ALLOWED_HOSTS": ""}, "WEAVE_ALLOWED_HOSTS is required"),
        ({"WEAVE_DEBUG": "1"}, "WEAVE_DEBUG=1 is refused"),
        ({"WEAVE_SECRET_KEY": "short-key"}, "WEAVE_SECRET_KEY: at least 50 characters"),
        ({"WEAVE_SECRET_KEY": "ab" * 40}, "WEAVE_SECRET_KEY: at least 50 characters"),
        ({"WEAVE_PROXY_SSL_HEADER": "X-Forwarded-Proto"}, "WEAVE_PROXY_SSL_HEADER"),
        ({"WEAVE_PROFILE": "prod"}, "WEAVE_PROFILE"),
    ],
)
def test_the_production_profile_refuses_an_unsafe_setting_by_name(change, named):
    done = _manage("check", **(PRODUCTION | change))
    assert done.returncode != 0
    assert named in done.stderr


# ---- headers -------------------------------------------------------------------------------

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def _assert_secure_headers(response) -> dict:
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, (response.request["PATH_INFO"], name)
    policy = dict(
        (part.split()[0], part.split()[1:]) for part in response.headers["Content-Security-Policy"].split("; ")
    )
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
    return policy


def _styles_carry_the_nonce(response, policy: dict) -> None:
    """Every inline <style> of the page carries the nonce the policy allows, so the browser applies it."""
    html = response.content.decode()
    styles = re.findall(r"<style([^>]*)>", html)
    assert styles, response.request["PATH_INFO"]
    nonces = {f"'nonce-{n}'" for n in re.findall(r'nonce="([^"]+)"', "".join(styles))}
    assert len(nonces) == 1 and nonces <= set(policy["style-src"]), (styles, policy["style-src"])
    assert "<script>" not in html and not re.search(r"\son[a-z]+=", html)


def _bootstrap(*args: str) -> dict:
    out = StringIO()
    call_command("weave_bootstrap", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def operator_login(tenancy):
    return _bootstrap(
        "--namespace", "acme", "--actor", "ops", "--recover-access", "--admin-user", "op", "--group", "operators"
    )


def test_every_admin_and_api_answer_carries_the_security_headers(api, client, tenancy, operator_login):
    state = task_unknown_state(tenancy)
    token = operator_login["token"]
    _assert_secure_headers(client.get("/admin/login/"))
    assert client.login(username="op", password=operator_login["admin_password"])
    _assert_secure_headers(client.get(reverse("admin:history_workflowinstance_changelist")))
    page = client.get(reverse("admin:history_workflowinstance_change", args=[state.instance.id]))
    assert page.status_code == 200
    _styles_carry_the_nonce(page, _assert_secure_headers(page))
    form = client.get(reverse("admin:history_workflowinstance_recovery", args=[state.instance.id, "review-task"]))
    assert form.status_code == 200
    _styles_carry_the_nonce(form, _assert_secure_headers(form))
    docs = client.get("/v1/docs/")
    _styles_carry_the_nonce(docs, _assert_secure_headers(docs))
    script = re.search(r'<script src="(/v1/docs/\?[^"]*)"', docs.content.decode()).group(1)
    assert client.get(script).headers["Content-Type"].startswith("application/javascript")
    for response in (
        api.get("/v1/credentials/self", **bearer(token)),
        api.get("/v1/credentials/self"),
        api.get(f"/v1/workflows/{state.instance.id}", **bearer(token)),
        api.get("/v1/openapi.json", **bearer(token)),
        api.get("/v1/no/such/thing", **bearer(token)),
    ):
        assert response.status_code in (200, 401, 404)
        _assert_secure_headers(response)


def test_the_production_profile_answers_plain_http_with_a_redirect_and_hsts_over_https():
    # Nothing is collected for this process: the login page names its static files by their plain names.
    plain_static = "{'staticfiles': {'BACKEND': 'django.contrib.staticfiles.storage.StaticFilesStorage'}}"
    code = (
        "from django.conf import settings;"
        "from django.test import Client, override_settings;"
        f"override_settings(STORAGES=settings.STORAGES | {plain_static}).enable();"
        "c = Client(SERVER_NAME='weave.example.com');"
        "r = c.get('/admin/login/');"
        "s = c.get('/admin/login/', secure=True);"
        "print(r.status_code, r.headers.get('Location'));"
        "print(s.status_code, s.headers.get('Strict-Transport-Security'));"
        "print('Secure' if 'secure' in str(s.cookies.get('csrftoken', '')).lower() else 'plain')"
    )
    done = _manage("shell", "-v", "0", "-c", code, **PRODUCTION)
    assert done.returncode == 0, done.stderr
    plain, tls, cookie = done.stdout.strip().splitlines()
    assert plain == "301 https://weave.example.com/admin/login/"
    assert tls == "200 max-age=31536000; includeSubDomains; preload"
    assert cookie == "Secure"


# ---- the admin login throttle ----------------------------------------------------------------

LIMIT = 5


@pytest.fixture
def logins(db, settings):
    assert settings.AXES_FAILURE_LIMIT == LIMIT
    for name in ("alice", "bob", "carol"):
        User.objects.create_user(name, password=f"{name}-right-password", is_staff=True)


def _login(username: str, password: str, address: str) -> tuple[int, bool]:
    """(status, logged in?) of one admin login from ``address``."""
    browser = Client(REMOTE_ADDR=address)
    response = browser.post("/admin/login/?next=/admin/", {"username": username, "password": password})
    if response.status_code == 429:
        # The refusal names the limit and the cool-off.
        assert f"({LIMIT} within 15 minutes)" in response.content.decode()
    return response.status_code, "_auth_user_id" in browser.session


def _wait_out_the_cool_off(settings) -> None:
    AccessAttempt.objects.update(
        attempt_time=dt.datetime.now(dt.UTC) - settings.AXES_COOLOFF_TIME - dt.timedelta(seconds=1)
    )


def test_wrong_passwords_for_one_user_lock_that_user_out_until_the_cool_off(logins, settings):
    for _ in range(LIMIT - 1):
        assert _login("alice", "wrong", "10.0.0.1") == (200, False)
    # The failure that reaches the limit is already answered with the lockout.
    assert _login("alice", "wrong", "10.0.0.1") == (429, False)
    # The right password is refused, from the same address and from another one.
    assert _login("alice", "alice-right-password", "10.0.0.1") == (429, False)
    assert _login("alice", "alice-right-password", "10.0.0.9") == (429, False)
    # Another user from another address is unaffected.
    assert _login("bob", "bob-right-password", "10.0.0.2") == (302, True)
    _wait_out_the_cool_off(settings)
    assert _login("alice", "alice-right-password", "10.0.0.9") == (302, True)


def test_wrong_passwords_from_one_address_lock_that_address_out_across_users(logins, settings):
    for n in range(LIMIT - 1):
        assert _login(f"guess{n}", "wrong", "10.0.0.3") == (200, False)
    assert _login("dave", "wrong", "10.0.0.3") == (429, False)
    assert _login("carol", "carol-right-password", "10.0.0.3") == (429, False)
    # The same user from another address is unaffected.
    assert _login("carol", "carol-right-password", "10.0.0.4") == (302, True)
    _wait_out_the_cool_off(settings)
    assert _login("carol", "carol-right-password", "10.0.0.3") == (302, True)


def test_below_the_limit_the_right_password_logs_in(logins):
    for _ in range(LIMIT - 1):
        assert _login("alice", "wrong", "10.0.0.5") == (200, False)
    assert _login("alice", "alice-right-password", "10.0.0.5") == (302, True)


def test_a_locked_out_address_still_reaches_the_api_with_its_bearer_token(logins, api, issue_token):
    token = issue_token(scopes=[Scope.READ]).token
    for n in range(LIMIT):
        _login(f"guess{n}", "wrong", "10.0.0.6")
    assert _login("alice", "alice-right-password", "10.0.0.6") == (429, False)
    assert api.get("/v1/credentials/self", REMOTE_ADDR="10.0.0.6", **bearer(token)).status_code == 200
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for _ in range(LIMIT + 1):
        assert api.get("/v1/credentials/self", REMOTE_ADDR="10.0.0.7", **bearer(wrong)).status_code == 401
    # Bad tokens are the API's own refusals: they count no login failure.
    assert _login("alice", "alice-right-password", "10.0.0.7") == (302, True)


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(logins, settings):
    settings.WEAVE_CLIENT_ADDRESS_META = "HTTP_X_FORWARDED_FOR"

    def login(username, password, forwarded):
        browser = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)
        return browser.post("/admin/login/", {"username": username, "password": password}).status_code

    # A client varying what it puts first is still counted at the address the proxy saw.
    for n in range(LIMIT - 1):
        assert login(f"guess{n}", "wrong", f"192.0.2.{n}, 203.0.113.5") == 200
    assert login("dave", "wrong", "192.0.2.77, 203.0.113.5") == 429
    assert login("carol", "carol-right-password", "203.0.113.5") == 429
    assert login("carol", "carol-right-password", "203.0.113.6") == 302
