"""POST /v1/workflows/{id}/decisions and GET …/decisions/{decision_id}: one call states a decision, the answer is
the decision as far as it ran, and reading it follows the chain the runner carries on."""

import json

import pytest

from engine.demo import demo_run
from engine.runner import runner_settle
from history.credentials import credential_issue
from history.models import Application, ApprovalPolicy, Decision, Namespace, Scope, WorkflowInstance
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def _operator(namespace: Namespace, actor_id: str) -> dict:
    """A token of an operator of the namespace (recover and read)."""
    issued = credential_issue(
        namespace_id=namespace.id,
        application_id=Application.objects.filter(namespace=namespace).values_list("id", flat=True).first(),
        actor_id=actor_id,
        label=f"decisions-{actor_id[0]}",
        scopes=[Scope.RECOVER, Scope.READ],
        queue_access="*",
    )
    return bearer(issued.token)


@pytest.fixture
def demo(api):
    """The demo's scenarios and a token of an operator of its namespace."""
    scenarios = demo_run(namespace="demo")["scenarios"]
    return scenarios, _operator(Namespace.objects.get(name="demo"), "e" * 32)


def _command(instance_id: str, **fields) -> dict:
    return {
        "kind": "conclude",
        "step_key": "charge",
        "expected_revision": str(WorkflowInstance.objects.get(id=instance_id).revision),
        "reason": "the provider confirms the charge",
        "evidence_ref": "ticket:OPS-42",
        "declared": True,
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
    } | fields


def _post(api, auth, instance_id: str, command: dict, key: str = "d-1"):
    return api.post(
        f"/v1/workflows/{instance_id}/decisions",
        data=json.dumps(command),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **auth,
    )


def test_a_decision_is_answered_as_far_as_it_ran_and_followed_to_its_end(api, demo):
    scenarios, auth = demo
    instance_id = scenarios["task_unknown"]["instance_id"]
    command = _command(instance_id)
    made = _post(api, auth, instance_id, command)
    assert made.status_code == 201, made.content
    data = json.loads(made.content)["data"]
    assert (data["state"], [s["operation"] for s in data["steps"]]) == ("RUNNING", ["review-task"])
    assert data["waiting"] == "the runner takes in the last step's result" and "refusal" not in data
    runner_settle()
    followed = api.get(f"/v1/workflows/{instance_id}/decisions/{data['id']}", **auth)
    assert followed.status_code == 200
    after = json.loads(followed.content)["data"]
    assert after["state"] == "SUCCEEDED" and "waiting" not in after
    assert [s["operation"] for s in after["steps"]] == ["review-task", "resolve-step", "continue"]
    assert WorkflowInstance.objects.get(id=instance_id).state == "SUCCEEDED"
    # The same key and command: the same decision, now, and nothing runs again.
    replay = _post(api, auth, instance_id, command)
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert json.loads(replay.content)["data"] == after and Decision.objects.count() == 1


@pytest.mark.parametrize(
    ("fields", "status", "code", "field"),
    [
        ({"kind": "guess"}, 400, "INVALID_ARGUMENT", "kind"),
        ({"declared": False}, 400, "INVALID_ARGUMENT", "declared"),
        ({"surprise": 1}, 400, "INVALID_ARGUMENT", "surprise"),
        ({"step_key": "nowhere"}, 404, "NOT_FOUND", "step_key"),
        ({"expected_revision": "1"}, 409, "ABORTED", None),
    ],
)
def test_a_bad_or_stale_decision_is_refused_and_nothing_is_stored(api, demo, fields, status, code, field):
    scenarios, auth = demo
    instance_id = scenarios["task_unknown"]["instance_id"]
    refused = _post(api, auth, instance_id, _command(instance_id, **fields))
    error = json.loads(refused.content)["error"]
    assert (refused.status_code, error["code"], error.get("field")) == (status, code, field)
    assert not Decision.objects.exists()


def test_reading_a_decision_needs_a_scope_and_names_an_unknown_one(api, demo, issue_token):
    scenarios, auth = demo
    instance_id = scenarios["task_unknown"]["instance_id"]
    missing = api.get(f"/v1/workflows/{instance_id}/decisions/{'f' * 32}", **auth)
    assert missing.status_code == 404 and json.loads(missing.content)["error"]["field"] == "decision_id"
    assert api.get(f"/v1/workflows/{instance_id}/decisions/{'f' * 32}").status_code == 401
    writer = bearer(issue_token(scopes=[Scope.WRITE]).token)
    assert _post(api, writer, instance_id, _command(instance_id)).status_code == 403


def test_under_four_eyes_a_decision_is_proposed_then_approved_by_a_second_person(api, demo):
    scenarios, auth = demo
    namespace = Namespace.objects.get(name="demo")
    ApprovalPolicy.objects.create(namespace=namespace, approvals_required=1)
    second = _operator(namespace, "c" * 32)
    instance_id = scenarios["task_unknown"]["instance_id"]
    made = json.loads(_post(api, auth, instance_id, _command(instance_id)).content)["data"]
    assert (made["state"], made["steps"], "expires_at" in made) == ("PROPOSED", [], True)
    url = f"/v1/workflows/{instance_id}/decisions/{made['id']}"

    def answer(action, who, body, key):
        return api.post(
            f"{url}/{action}", data=json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY=key, **who
        )

    own = answer("approve", auth, {}, "a-0")
    assert (own.status_code, json.loads(own.content)["error"]["code"]) == (403, "PERMISSION_DENIED")
    approved = answer("approve", second, {"reason": "checked the ticket"}, "a-1")
    assert approved.status_code == 200, approved.content
    data = json.loads(approved.content)["data"]
    assert data["state"] == "RUNNING" and data["approval"]["by"] == "c" * 32
    assert data["approval"]["outcome"] == "APPROVED" and data["approval"]["note"] == "checked the ticket"
    runner_settle()
    assert json.loads(api.get(url, **auth).content)["data"]["state"] == "SUCCEEDED"
    late = answer("reject", second, {"reason": "too late"}, "r-1")
    error = json.loads(late.content)["error"]
    assert (late.status_code, error["code"]) == (400, "FAILED_PRECONDITION") and "approved by" in error["message"]
