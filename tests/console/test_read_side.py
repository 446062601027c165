"""The admin console's read side: scoping by namespace and queues, the instance page, audits."""

import re

import pytest
from django.contrib.auth.models import Group, User
from django.utils.html import escape

from core import exactjson
from core.ids import ROOT_STEP_KEY
from history import models
from history.models import ApprovalPolicy, ReviewCause
from history.tenancy import namespace_ensure
from testkit import states
from testkit.driver import task_step

pytestmark = pytest.mark.django_db

SPEC = {
    "steps": [
        {"key": "charge", "kind": "TASK", "after": [], "queue": "payments"},
        {"key": "notify", "kind": "TASK", "after": ["charge"], "queue": "payments"},
    ]
}


def _instance(namespace, *, queues=("payments",), charge_state="NEEDS_REVIEW"):
    definition = models.WorkflowDefinition.objects.create(
        namespace=namespace,
        name="checkout",
        version=models.WorkflowDefinition.objects.count() + 1,
        spec=SPEC,
        queues=list(queues),
    )
    instance = models.WorkflowInstance.objects.create(
        namespace=namespace, definition=definition, state="NEEDS_REVIEW", input="{}", revision=7
    )
    models.Gate.objects.create(instance=instance, open=False)
    models.Step.objects.create(instance=instance, key=ROOT_STEP_KEY, kind="ROOT", state="ACTIVE")
    charge = models.Step.objects.create(instance=instance, key="charge", kind="TASK", state=charge_state)
    models.Step.objects.create(instance=instance, key="notify", kind="TASK")
    activation = models.Activation.objects.create(
        step=charge, instance=instance, sequence=1, state=charge_state, input='{"amount":1.10}'
    )
    charge.current_activation = activation
    charge.save()
    return instance


def _user(name, namespace, group, queues="*"):
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.groups.set([Group.objects.get(name=group)])
    models.Operator.objects.create(user=user, namespace=namespace, actor_id="b" * 32, queue_access=queues)
    return user


@pytest.fixture
def acme():
    return namespace_ensure(name="acme", application="billing", queues=["payments"])[0]


def test_the_migrate_creates_the_three_console_groups():
    assert set(Group.objects.values_list("name", flat=True)) >= {"operators", "auditors", "viewers"}
    operators = Group.objects.get(name="operators").permissions.values_list("codename", flat=True)
    auditors = Group.objects.get(name="auditors").permissions.values_list("codename", flat=True)
    viewers = Group.objects.get(name="viewers").permissions.values_list("codename", flat=True)
    assert "recover_workflowinstance" in operators
    assert "recover_workflowinstance" not in auditors and "recover_workflowinstance" not in viewers
    assert "audit_workflowinstance" in auditors and "audit_workflowinstance" not in viewers
    assert "view_signaloperation" in auditors and "view_signaloperation" not in viewers


def test_the_instance_page_draws_the_graph_and_the_timeline(client, acme):
    instance = _instance(acme)
    client.force_login(_user("olga", acme, "operators"))
    response = client.get(f"/admin/history/workflowinstance/{instance.id}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="weave-graph"' in html
    assert 'class="step state-NEEDS_REVIEW" data-step="charge"' in html
    assert 'class="step state-PENDING" data-step="notify"' in html
    assert 'data-sequence="1"' in html
    assert 'id="audit"' not in html


def test_the_instance_page_shows_the_output_exactly_once_the_instance_has_one(client, engine):
    definition = engine.define([task_step("charge")])
    done = engine.start(definition, exactjson.loads('{"n": 12345678901234567890123, "amount": 1.10}'))
    engine.settle()
    assert engine.work() is not None
    engine.settle()
    running = engine.start(definition, {})
    engine.settle()
    done = engine.reload(done)
    assert done.state == "SUCCEEDED" and done.output == '{"charge":{"n":12345678901234567890123,"amount":1.10}}'
    client.force_login(_user("olga", engine.namespace, "viewers"))
    html = client.get(f"/admin/history/workflowinstance/{done.id}/change/").content.decode()
    shown = f'<code class="weave-json" id="instance-output">{escape(done.output)}</code>'
    assert f'<dt>Output</dt><dd class="weave-fact-wide">{shown}</dd>' in html
    html = client.get(f"/admin/history/workflowinstance/{running.id}/change/").content.decode()
    assert 'id="weave-instance"' in html and "<dt>Output</dt>" not in html


def test_an_instance_of_another_namespace_is_not_found(client, acme):
    other = namespace_ensure(name="other", application="x", queues=["payments"])[0]
    instance = _instance(other)
    client.force_login(_user("olga", acme, "operators"))
    assert client.get(f"/admin/history/workflowinstance/{instance.id}/change/").status_code == 404
    assert instance.id not in client.get("/admin/history/workflowinstance/").content.decode()


def test_an_instance_behind_an_inaccessible_queue_is_hidden(client, acme):
    instance = _instance(acme, queues=("payments", "ledger"))
    client.force_login(_user("olga", acme, "operators", queues=["payments"]))
    assert client.get(f"/admin/history/workflowinstance/{instance.id}/change/").status_code == 404
    changelist = client.get("/admin/history/workflowinstance/")
    assert changelist.status_code == 200
    assert instance.id not in changelist.content.decode()


def test_auditors_see_the_audit_with_before_and_after(client, acme):
    instance = _instance(acme)
    operation = models.WorkflowOperation.objects.create(
        namespace=acme,
        workflow=instance,
        actor_id="c" * 32,
        action="workflow.continue",
        reason="checked",
        before={"state": "NEEDS_REVIEW", "paused": False},
        after={"state": "RUNNING", "paused": False},
    )
    client.force_login(_user("audrey", acme, "auditors"))
    page = client.get(f"/admin/history/workflowinstance/{instance.id}/change/").content.decode()
    assert 'id="audit"' in page and "workflow.continue" in page
    detail = client.get(f"/admin/history/workflowoperation/{operation.id}/change/")
    assert detail.status_code == 200
    html = detail.content.decode()
    assert '<tr class="changed"><th>state</th>' in html
    assert '<tr class="same"><th>paused</th>' in html


def test_viewers_cannot_open_the_audit_tables(client, acme):
    client.force_login(_user("vic", acme, "viewers"))
    assert client.get("/admin/history/workflowoperation/").status_code == 403
    assert client.get("/admin/history/workflowinstance/").status_code == 200


def test_no_engine_table_can_be_added_changed_or_deleted_in_the_admin(client, acme):
    from django.contrib import admin

    user = User.objects.create_superuser("root", password="pw")
    request = type("R", (), {"user": user})()
    for model, model_admin in admin.site._registry.items():
        # The approval policies and webhooks are the console's own settings, which the approvers group manages.
        if model._meta.app_label != "history" or model in (ApprovalPolicy, models.Webhook):
            continue
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model


def test_tasks_on_an_inaccessible_queue_are_hidden_from_the_task_list(client, acme):
    instance = _instance(acme)
    app = models.Application.objects.get(namespace=acme)
    ledger = models.Queue.objects.create(namespace=acme, name="ledger")
    payments = models.Queue.objects.get(namespace=acme, name="payments")
    common = {"namespace": acme, "application": app, "handler": "h", "input": "{}", "source_instance": instance}
    seen = models.Task.objects.create(queue=payments, source_activation_id="1" * 32, **common)
    hidden = models.Task.objects.create(queue=ledger, source_activation_id="2" * 32, **common)
    client.force_login(_user("olga", acme, "operators", queues=["payments"]))
    html = client.get("/admin/history/task/").content.decode()
    assert seen.id in html
    assert hidden.id not in html
    assert client.get(f"/admin/history/task/{hidden.id}/change/").status_code == 302


def _grow_history(instance, activations: int):
    charge = models.Step.objects.get(instance=instance, key="charge")
    app = models.Application.objects.get(namespace_id=instance.namespace_id)
    queue = models.Queue.objects.get(namespace_id=instance.namespace_id, name="payments")
    for sequence in range(2, activations + 1):
        activation = models.Activation.objects.create(
            step=charge, instance=instance, sequence=sequence, state="FAILED", input="{}"
        )
        task = models.Task.objects.create(
            namespace_id=instance.namespace_id,
            application=app,
            queue=queue,
            handler="h",
            input="{}",
            source_instance=instance,
            source_activation=activation,
            state="FAILED",
            attempt_count=1,
        )
        models.Attempt.objects.create(task=task, number=1, worker="w", state="FAILED")
        models.Activation.objects.filter(id=activation.id).update(task=task)


def _queries(client, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm the per-process queue-name cache
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.parametrize(
    "url",
    [
        "/admin/history/workflowinstance/{id}/change/",
        "/admin/history/workflowinstance/",
        "/admin/history/task/",
        "/admin/history/activation/",
        "/admin/history/attempt/",
        "/admin/history/gate/",
        "/admin/history/step/",
        "/admin/history/resultevent/",
    ],
)
def test_page_query_counts_do_not_grow_with_the_history(client, acme, url):
    small, large = _instance(acme), _instance(acme)
    _grow_history(small, 2)
    _grow_history(large, 30)
    client.force_login(_user("olga", acme, "operators"))
    assert _queries(client, url.format(id=small.id)) == _queries(client, url.format(id=large.id))
    before = _queries(client, url.format(id=large.id))
    _grow_history(_instance(acme), 25)
    assert _queries(client, url.format(id=large.id)) == before


def test_the_instance_list_shows_and_filters_by_review_cause_step_and_time(client, tenancy):
    namespace = tenancy[0]
    unknown = states.task_unknown_state(tenancy).instance
    late = states.timer_late_state(tenancy).instance
    client.force_login(_user("olga", namespace, "operators"))
    html = client.get("/admin/history/workflowinstance/").content.decode()
    # Sorted only by what an index serves in order: the review's age and the update; a cause is a filter.
    for header in ("In review for", "Updated"):
        assert f">{header}</a>" in html, header
    assert "<span>Review cause · step</span>" in html
    assert '<td class="field-cause_of_review">task_outcome_unknown · charge</td>' in html
    assert '<td class="field-cause_of_review">timer_late · cooldown</td>' in html
    assert re.search(r'<td class="field-in_review_for"><span title="[^"]+ UTC">(\d+ \w+ ?)+</span></td>', html)
    filtered = client.get("/admin/history/workflowinstance/", {"review_cause__exact": "timer_late"}).content.decode()
    assert late.id in filtered and unknown.id not in filtered
    assert ReviewCause.TIMER_LATE.label in filtered  # the filter names each cause by its meaning


def test_a_record_list_counts_a_page_past_the_one_shown_and_never_shows_all(client, acme, monkeypatch):
    # Each step counted reads its instance (its namespace): the count stops where the next page's link ends.
    from console.admins.base import CappedCountPaginator
    from console.admins.records import StepAdmin

    monkeypatch.setattr(StepAdmin, "list_per_page", 2)
    monkeypatch.setattr(StepAdmin, "list_max_show_all", 2)
    for _ in range(3):
        _instance(acme)  # three steps each
    client.force_login(_user("olga", acme, "operators"))

    def paginator(query: str) -> str:
        html = client.get(f"/admin/history/step/{query}").content.decode()
        return re.search(r'<p class="paginator">(.*?)</p>', html, re.S).group(1)

    assert "more than 4 steps" in paginator("")
    assert "more than 6 steps" in paginator("?p=2")
    last = paginator("?p=4")
    assert "9 steps" in last and "more than" not in last
    assert "Show all" not in paginator("")
    shown = client.get("/admin/history/step/?all=").context["cl"].result_list
    assert len(shown) == 2
    # Never past the cap every list keeps, however deep the page asked for.
    monkeypatch.setattr(CappedCountPaginator, "CAP", 5)
    assert "more than 5 steps" in paginator("?p=2")
