"""Who may see an instance: one rule and one NOT_FOUND answer for reads, commands, recovery and the admin."""

import json

import pytest
from django.contrib.auth.models import User
from django.http import Http404
from django.test import RequestFactory

from console.admin import WorkflowInstanceAdmin
from history.models import Operator, Scope, WorkflowInstance
from history.selectors.access import INSTANCE_NOT_FOUND
from tests.conftest import STEPS, bearer
from tests.factories import NamespaceFactory, WorkflowInstanceFactory

COMMON = {"expected_revision": "1", "reason": "checked", "evidence_ref": "ticket:OPS-1"}
SIGNAL = {"name": "approve", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "checked"}
# (method, path after /v1/workflows/{id}, scope, well-formed body) of routes naming one instance.
ROUTES = [
    ("get", "", Scope.READ, None),
    ("get", "/operations", Scope.AUDIT_READ, None),
    ("get", "/steps/charge/activations", Scope.READ, None),
    ("get", "/events", Scope.READ, None),
    ("post", "/pause", Scope.CONTROL, {"expected_control_revision": "1"}),
    ("post", "/signals", Scope.WRITE, SIGNAL),
    ("post", "/recovery/continue", Scope.RECOVER, COMMON | {"review_resolved": True}),
]


def _invisible(tenancy, case: str) -> tuple[str, str | list[str]]:
    """(instance id, the caller's queue access) for an instance the caller may not see."""
    if case == "missing":
        return "e" * 32, "*"
    if case == "another namespace":
        return WorkflowInstanceFactory(namespace=NamespaceFactory(), definition__spec={"steps": STEPS}).id, "*"
    return WorkflowInstanceFactory(namespace=tenancy[0], definition__spec={"steps": STEPS}).id, ["ledger"]


@pytest.mark.parametrize("case", ["missing", "another namespace", "inaccessible queue"])
@pytest.mark.parametrize(("method", "tail", "scope", "body"), ROUTES, ids=[f"{m} {t or '/'}" for m, t, _, _ in ROUTES])
def test_every_route_answers_an_invisible_instance_alike(tenancy, issue_token, api, case, method, tail, scope, body):
    instance_id, queues = _invisible(tenancy, case)
    token = issue_token(scopes=[scope], queues=queues).token
    path = f"/v1/workflows/{instance_id}{tail}"
    if method == "get":
        response = api.get(path, **bearer(token))
    else:
        response = api.post(
            path, json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1", **bearer(token)
        )
    assert response.status_code == 404, response.content
    assert response.json()["error"] == {"code": "NOT_FOUND", "message": INSTANCE_NOT_FOUND}


@pytest.mark.parametrize("case", ["missing", "another namespace", "inaccessible queue"])
def test_the_admin_answers_an_invisible_instance_with_the_same_message(tenancy, case):
    instance_id, queues = _invisible(tenancy, case)
    user = User.objects.create_user("operator", is_staff=True)
    Operator.objects.create(user=user, namespace=tenancy[0], actor_id="b" * 32, queue_access=queues)
    request = RequestFactory().get("/admin/")
    request.user = User.objects.get(pk=user.pk)
    model_admin = WorkflowInstanceAdmin(WorkflowInstance, None)
    with pytest.raises(Http404) as refused:
        model_admin.visible_instance(request, instance_id)
    assert str(refused.value) == INSTANCE_NOT_FOUND
