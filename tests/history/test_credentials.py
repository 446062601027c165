import datetime as dt
import json

import pytest
from django.core.management import CommandError, call_command

from core import clock
from history.models import Credential, Namespace, Queue, Scope
from tests.conftest import bearer


def _error(response):
    body = json.loads(response.content)
    assert set(body) == {"request_id", "error"}
    assert len(body["request_id"]) == 32
    assert response["X-Request-Id"] == body["request_id"]
    return body["error"]


def test_only_a_digest_of_the_token_is_stored(issue_token):
    issued = issue_token()
    row = Credential.objects.get(id=issued.credential.id)
    stored = " ".join(str(v) for v in row.__dict__.values())
    assert issued.token not in stored
    assert issued.token.split("_", 2)[2] not in stored
    assert len(row.token_digest) == 64


def test_a_valid_token_answers_in_the_envelope(api, issue_token):
    issued = issue_token(scopes=[Scope.READ], queues=["payments"])
    response = api.get("/v1/credentials/self", **bearer(issued.token))
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["request_id"] == response["X-Request-Id"]
    assert body["data"] == {
        "credential_id": issued.credential.id,
        "namespace_id": issued.credential.namespace_id,
        "actor_id": "a" * 32,
        "scopes": ["workflows:read"],
        "queues": ["payments"],
    }


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-token",
        "Bearer weave_0000000000000000_" + "A" * 43,
        "Bearer weave_0000000000000000_" + "A" * 43 + " extra",
    ],
)
def test_missing_malformed_or_unknown_tokens_are_401(api, issue_token, header):
    issue_token()
    headers = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = api.get("/v1/credentials/self", **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert _error(response)["code"] == "UNAUTHENTICATED"


def test_a_wrong_secret_for_a_known_key_is_401(api, issue_token):
    issued = issue_token()
    forged = issued.token[:-4] + ("AAAA" if not issued.token.endswith("AAAA") else "BBBB")
    response = api.get("/v1/credentials/self", **bearer(forged))
    assert response.status_code == 401


def test_a_revoked_token_stops_working_on_the_next_request(api, issue_token):
    issued = issue_token()
    assert api.get("/v1/credentials/self", **bearer(issued.token)).status_code == 200
    Credential.objects.filter(id=issued.credential.id).update(revoked_at=clock.now())
    response = api.get("/v1/credentials/self", **bearer(issued.token))
    assert response.status_code == 401
    assert _error(response)["code"] == "UNAUTHENTICATED"


def test_an_expired_token_is_401(api, issue_token):
    issued = issue_token(expires_at=clock.now() + dt.timedelta(minutes=5))
    assert api.get("/v1/credentials/self", **bearer(issued.token)).status_code == 200
    with clock.moved(dt.timedelta(minutes=6)):
        response = api.get("/v1/credentials/self", **bearer(issued.token))
    assert response.status_code == 401


def test_unknown_endpoint_answers_404_in_the_envelope(api, issue_token):
    response = api.get("/v1/no/such/thing", **bearer(issue_token().token))
    assert response.status_code == 404
    assert _error(response)["code"] == "NOT_FOUND"


def test_wrong_method_answers_in_the_envelope(api, issue_token):
    response = api.post("/v1/credentials/self", {}, format="json", **bearer(issue_token().token))
    assert response.status_code == 405
    assert _error(response)["code"] == "METHOD_NOT_ALLOWED"


def test_an_unhandled_error_is_500_in_the_envelope_without_internals(api, issue_token, monkeypatch):
    from api import identity_views

    def explode(self, request):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(identity_views.CredentialSelfView, "get", explode)
    response = api.get("/v1/credentials/self", **bearer(issue_token().token))
    assert response.status_code == 500
    error = _error(response)
    assert error == {"code": "INTERNAL", "message": "internal error"}
    assert b"secret internal detail" not in response.content


def _bootstrap(*args):
    from io import StringIO

    out = StringIO()
    call_command("weave_bootstrap", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_bootstrap_json_prints_the_credential_once():
    summary = json.loads(
        _bootstrap("--namespace", "ops", "--actor", "alice", "--queues", "a,b", "--create-queue", "--json")
    )
    assert set(summary) == {"token", "credential_id", "actor_id", "namespace", "scopes", "queues"}
    assert summary["queues"] == ["a", "b"]
    assert summary["scopes"] == ["tasks:work", "workflows:control", "workflows:read", "workflows:write"]
    assert sorted(Queue.objects.values_list("name", flat=True)) == ["a", "b"]


@pytest.mark.django_db
def test_default_scopes_never_imply_audit_or_recover():
    summary = json.loads(_bootstrap("--namespace", "ops", "--actor", "bob", "--json"))
    assert Scope.AUDIT_READ not in summary["scopes"]
    assert Scope.RECOVER not in summary["scopes"]


@pytest.mark.django_db
def test_audit_and_recover_scopes_need_their_explicit_flags():
    summary = json.loads(
        _bootstrap("--namespace", "ops", "--actor", "eve", "--workflow-audit-access", "--recover-access", "--json")
    )
    assert {Scope.AUDIT_READ, Scope.RECOVER} <= set(summary["scopes"])
    for scope in (Scope.AUDIT_READ, Scope.RECOVER):
        with pytest.raises(CommandError, match="granted only by"):
            _bootstrap("--namespace", "ops2", "--actor", "eve", "--scopes", f"workflows:read,{scope}")
    assert not Namespace.objects.filter(name="ops2").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--namespace", "Bad Name", "--actor", "x"], "--namespace"),
        (["--namespace", "ok", "--actor", "x", "--queues", "a,,b"], "--queues"),
        (["--namespace", "ok", "--actor", "x", "--scopes", "workflows:everything"], "--scopes"),
        (["--namespace", "ok", "--actor", "   "], "--actor"),
    ],
)
def test_bad_bootstrap_flags_name_the_flag_and_write_nothing(args, field):
    with pytest.raises(CommandError, match=field):
        _bootstrap(*args)
    assert Namespace.objects.count() == 0
    assert Credential.objects.count() == 0
