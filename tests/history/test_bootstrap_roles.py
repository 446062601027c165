"""weave_bootstrap: a token's scopes follow the login's role, nothing is replaced silently, bad flags write nothing."""

import json
import re
from contextlib import contextmanager
from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError

from history.models import Credential, Namespace, Operator, Queue, Scope
from history.tenancy import namespace_ensure
from tests.conftest import bearer

pytestmark = pytest.mark.django_db
OPERATOR_DEFAULT = sorted([Scope.READ, Scope.WRITE, Scope.CONTROL, Scope.TASKS_WORK])


def _bootstrap(*args: str) -> dict:
    out = StringIO()
    call_command("weave_bootstrap", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def _login(*args: str) -> dict:
    return _bootstrap("--namespace", "acme", "--actor", "pat", "--admin-user", "pat", *args)


def _tables() -> dict:
    return {
        "namespaces": sorted(Namespace.objects.values_list("name", flat=True)),
        "queues": sorted(Queue.objects.values_list("name", flat=True)),
        "credentials": Credential.objects.count(),
        "users": sorted(User.objects.values_list("username", "password")),
        "memberships": sorted(User.groups.through.objects.values_list("user_id", "group_id")),
        "operators": sorted(Operator.objects.values_list("user_id", "namespace_id", "actor_id", "queue_access")),
    }


@contextmanager
def _refused(flag: str):
    before = _tables()
    with pytest.raises(CommandError, match=re.escape(flag)):
        yield
    assert _tables() == before


# ---- scopes per role -------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [["viewers"], ["auditors"], ["viewers", "auditors"]])
def test_a_read_only_login_gets_no_token_unless_asked(groups):
    summary = _login(*[a for g in groups for a in ("--group", g)])
    assert summary["token"] is None and summary["scopes"] == [] and summary["credential_id"] is None
    assert summary["admin_groups"] == sorted(groups)
    assert Credential.objects.count() == 0
    assert User.objects.get(username="pat").check_password(summary["admin_password"])


def test_a_viewer_token_has_exactly_the_scopes_asked_and_cannot_pause(api):
    summary = _login("--group", "viewers", "--token-scopes", Scope.READ)
    assert summary["scopes"] == [Scope.READ]
    assert Credential.objects.get().scopes == [Scope.READ]
    pause = api.post(
        "/v1/workflows/0123456789abcdef0123456789abcdef/pause",
        data="{}",
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="viewer-pause",
        **bearer(summary["token"]),
    )
    assert pause.status_code == 403


def test_an_auditor_asks_for_audit_access_alongside_its_scopes():
    summary = _login("--group", "auditors", "--token-scopes", Scope.READ, "--workflow-audit-access")
    assert summary["scopes"] == sorted([Scope.READ, Scope.AUDIT_READ])


@pytest.mark.parametrize(
    "asked",
    [[Scope.READ], [Scope.TASKS_WORK], [Scope.READ, Scope.CONTROL], [Scope.WRITE, Scope.READ, Scope.WRITE]],
)
def test_token_scopes_are_issued_exactly(asked):
    summary = _bootstrap("--namespace", "acme", "--actor", "svc", "--token-scopes", ",".join(asked))
    assert summary["scopes"] == sorted(set(asked))
    assert Credential.objects.get().scopes == sorted(set(asked))


def test_an_operators_login_keeps_the_operator_default_and_the_flags_add_to_it():
    assert _login("--group", "operators")["scopes"] == OPERATOR_DEFAULT
    demo = _bootstrap(
        *("--namespace", "demo", "--actor", "operator", "--workflow-audit-access", "--recover-access"),
        *("--admin-user", "admin", "--group", "operators", "--group", "auditors"),
    )
    # Every scope but workflows:annotate, which only --token-scopes names (workflows:recover covers notes too).
    assert demo["scopes"] == sorted(set(Scope.values) - {Scope.ANNOTATE})
    assert demo["admin_groups"] == ["auditors", "operators"]
    assert User.objects.get(username="admin").check_password(demo["admin_password"])


def test_the_help_states_the_defaults_the_command_applies(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no line breaks inside a scope list
    with pytest.raises(SystemExit):
        call_command("weave_bootstrap", "--help")
    text = " ".join(capsys.readouterr().out.split())
    stated = re.search(r"Default: (\S+) without --admin-user", text).group(1).split(",")
    assert sorted(stated) == _bootstrap("--namespace", "acme", "--actor", "svc")["scopes"] == OPERATOR_DEFAULT
    assert sorted(stated) == _login()["scopes"], "a new login is in operators by default"
    assert "default for a new login: operators" in text
    assert "no token for a login in no group but viewers/auditors" in text
    assert "(default: *)" in text and "unless --create-queue" in text
    for scope in Scope.values:
        assert scope in text


# ---- re-bootstrap adds or fails ----------------------------------------------------------------


def test_re_bootstrap_adds_groups_and_queues_and_keeps_the_password():
    namespace_ensure(name="acme", application="default", queues=["a", "b"])
    first = _login("--group", "viewers", "--queues", "a")
    again = _login("--group", "auditors", "--queues", "b")
    assert again["admin_groups"] == ["auditors", "viewers"]
    assert again["admin_queues"] == ["a", "b"]
    assert again["admin_password"] is None
    user = User.objects.get(username="pat")
    assert user.check_password(first["admin_password"])
    assert Operator.objects.get(user=user).queue_access == ["a", "b"]
    # No --group adds none; a viewer is never promoted to operators by default.
    assert _login()["admin_groups"] == ["auditors", "viewers"]
    assert Credential.objects.count() == 0


def test_re_bootstrap_with_reset_password_prints_a_new_working_one():
    first = _login("--group", "operators")
    again = _login("--reset-password")
    assert again["admin_password"] not in (None, first["admin_password"])
    user = User.objects.get(username="pat")
    assert user.check_password(again["admin_password"]) and not user.check_password(first["admin_password"])
    assert again["admin_groups"] == ["operators"]


@pytest.mark.parametrize(
    "elsewhere",
    [["--namespace", "other", "--actor", "pat"], ["--namespace", "acme", "--actor", "someone-else"]],
)
def test_re_bootstrap_into_another_namespace_or_actor_fails_and_writes_nothing(elsewhere):
    _login("--group", "operators")
    with _refused("--admin-user: 'pat' already acts as another actor or in namespace 'acme'"):
        _bootstrap(*elsewhere, "--admin-user", "pat", "--group", "auditors", "--reset-password")


def test_a_superuser_without_an_operator_row_gains_one_and_keeps_its_groups():
    User.objects.create_superuser("root", password="pw")
    summary = _bootstrap("--namespace", "acme", "--actor", "root", "--admin-user", "root")
    assert summary["admin_groups"] == [] and summary["token"] is None
    assert Operator.objects.filter(user__username="root").exists()
    assert User.objects.get(username="root").check_password("pw")


# ---- queues ------------------------------------------------------------------------------------


def test_an_unknown_queue_is_an_error_naming_queues_and_writes_nothing():
    namespace_ensure(name="acme", application="default", queues=["payments"])
    with _refused("--queues: no queue paymnets in namespace 'acme'"):
        _bootstrap("--namespace", "acme", "--actor", "svc", "--queues", "payments,paymnets")
    with _refused("--create-queue"):
        _bootstrap("--namespace", "fresh", "--actor", "svc", "--queues", "jobs")


def test_create_queue_creates_the_named_queues():
    summary = _bootstrap("--namespace", "acme", "--actor", "svc", "--queues", "a,b", "--create-queue")
    assert summary["queues"] == ["a", "b"]
    assert sorted(Queue.objects.filter(namespace__name="acme").values_list("name", flat=True)) == ["a", "b"]
    assert _bootstrap("--namespace", "acme", "--actor", "svc", "--queues", "b")["queues"] == ["b"]


# ---- every bad flag names the flag and writes nothing ------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--group", "viewers", "--workflow-audit-access"], "--workflow-audit-access: a login in viewers"),
        (["--group", "auditors", "--recover-access"], "--recover-access: a login in auditors"),
        (["--token-scopes", "workflows:read,workflows:everything"], "--token-scopes: unknown scope"),
        (["--token-scopes", ","], "--token-scopes: unknown scope"),
        (["--token-scopes", Scope.RECOVER], "--token-scopes: workflows:recover is granted only by --recover-access"),
        (["--token-scopes", Scope.AUDIT_READ], "--token-scopes: workflows:audit:read is granted only by"),
        (["--scopes", "nope"], "--scopes: unknown scope"),
        (["--scopes", Scope.READ, "--token-scopes", Scope.READ], "--scopes: not with --token-scopes"),
        (["--no-token", "--token-scopes", Scope.READ], "--token-scopes: not with --no-token"),
        (["--no-token", "--recover-access"], "--recover-access: not with --no-token"),
        (["--queues", "*", "--create-queue"], "--create-queue: name the queues"),
        (["--queues", "a,,b"], "--queues: invalid"),
        (["--queues", "nowhere"], "--queues: no queue nowhere"),
    ],
)
def test_a_bad_flag_for_a_login_names_the_flag_and_writes_nothing(args, flag):
    with _refused(flag):
        _login(*args)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--group", "viewers"], "--group: only with --admin-user"),
        (["--reset-password"], "--reset-password: only with --admin-user"),
    ],
)
def test_login_flags_without_a_login_name_the_flag_and_write_nothing(args, flag):
    with _refused(flag):
        _bootstrap("--namespace", "acme", "--actor", "svc", *args)


def test_no_token_makes_a_login_only():
    summary = _login("--group", "operators", "--no-token")
    assert summary["token"] is None and Credential.objects.count() == 0
    assert Group.objects.get(name="operators").user_set.filter(username="pat").exists()


def test_remember_keeps_the_login_and_token_while_they_work_and_replaces_them_when_they_do_not(tmp_path, client):
    kept = tmp_path / "var" / "login.json"
    args = ("--recover-access", "--reset-password", "--remember", str(kept))
    first = _login(*args)
    assert kept.stat().st_mode & 0o777 == 0o600 and json.loads(kept.read_text()) == first
    client.force_login(User.objects.get(username="pat"))
    before = _tables()

    again = _login(*args)
    assert again == first and _tables() == before  # no new credential, the password hash (and sessions) kept
    assert client.get("/admin/").status_code == 200
    assert client.get("/v1/workflows", HTTP_AUTHORIZATION=f"Bearer {first['token']}").status_code == 200

    Credential.objects.filter(pk=first["credential_id"]).update(revoked_at="2026-01-01T00:00:00Z")
    renewed = _login(*args)
    assert renewed["credential_id"] != first["credential_id"] and renewed["admin_password"] != first["admin_password"]
    assert json.loads(kept.read_text()) == renewed

    other = _bootstrap("--namespace", "acme", "--actor", "sam", "--remember", str(kept))
    assert other["actor_id"] != renewed["actor_id"] and other["token"] != renewed["token"]


def test_remember_prints_the_kept_login_again_in_words(tmp_path):
    kept = tmp_path / "login.json"
    args = ("--namespace", "acme", "--actor", "pat", "--admin-user", "pat", "--reset-password", "--remember", str(kept))
    out = StringIO()
    call_command("weave_bootstrap", *args, stdout=out)
    first = json.loads(kept.read_text())
    out = StringIO()
    call_command("weave_bootstrap", *args, stdout=out)
    text = out.getvalue()
    assert f"token (kept in {kept}): {first['token']}" in text
    assert f"admin login: pat / {first['admin_password']} (unchanged since the last run)" in text
