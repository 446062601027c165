import pytest
from django.contrib.auth.models import Group, User

from history import models
from history.tenancy import namespace_ensure
from tests.browser.conftest import admin_login

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_auditor_sees_before_and_after_of_a_signal_operation_and_no_recovery_buttons(live_server, page, screenshots):
    namespace = namespace_ensure(name="acme", application="billing", queues=["payments"])[0]
    definition = models.WorkflowDefinition.objects.create(
        namespace=namespace, name="job", version=1, spec={"steps": []}, queues=["payments"]
    )
    instance = models.WorkflowInstance.objects.create(namespace=namespace, definition=definition, input="{}")
    signal = models.Signal.objects.create(
        namespace=namespace,
        workflow=instance,
        name="approved",
        payload="{}",
        target_step_key="wait",
        expires_at=instance.created_at,
        actor_id="c" * 32,
    )
    operation = models.SignalOperation.objects.create(
        namespace=namespace,
        workflow=instance,
        signal=signal,
        actor_id="c" * 32,
        action="workflow.signal",
        reason="verified external completion",
        before=None,
        after={"signal_id": signal.id, "state": "PENDING"},
    )
    user = User.objects.create_user("audrey", password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name="auditors")])
    models.Operator.objects.create(user=user, namespace=namespace, actor_id="d" * 32, queue_access="*")

    admin_login(page, live_server, "audrey")
    page.goto(f"{live_server.url}/admin/history/signaloperation/{operation.id}/change/")
    diff = page.locator("table.weave-diff")
    assert diff.locator("tr.changed th", has_text="state").count() == 1
    assert "PENDING" in diff.inner_text()
    page.screenshot(path=str(screenshots / "auditor-signal-operation.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/history/workflowinstance/{instance.id}/change/")
    assert page.locator("#weave-instance").count() == 1
    assert page.locator("[data-operation]").count() == 0
    assert page.locator(".weave-actions a.button").count() == 0
