"""The queue groups the instances in review by failure signature, with a sample and arrivals, and drills down; the
home page lists what the watchdog marked stalled outside review."""

import datetime as dt
import html
import re

import pytest
from django.test import override_settings

from core import clock
from engine.instances import instance_pause
from engine.watchdog import pass_watchdog
from history.metrics import metrics_text
from history.models import FailureSignature, WorkflowInstance
from testkit.states import task_failed_state, task_retried_state, task_unknown_state
from tests.engine.test_watchdog import _control, _started

pytestmark = pytest.mark.django_db


def test_the_queue_counts_by_signature_and_a_signature_filters_its_rows(client, tenancy, console_user):
    unknown = [task_unknown_state(tenancy).instance for _ in range(2)]
    failed = task_failed_state(tenancy).instance
    client.force_login(console_user("olga", "operators"))
    home = client.get("/admin/").content.decode()
    listed = re.findall(r'<li data-signature="(\w+)">.*?<strong data-count>(\d+)</strong>', home, re.S)
    counts = {FailureSignature.objects.get(pk=key).review_cause: int(n) for key, n in listed}
    # The two unknown tasks' reasons differ only in their ids: one signature, two instances.
    assert counts == {"task_outcome_unknown": 2, "task_failed_budget_left": 1}
    assert 'role="img" aria-label="arrivals per hour, oldest first: ' in home
    chosen = WorkflowInstance.objects.get(pk=unknown[0].pk).failure_signature_id
    page = client.get("/admin/", {"signature": chosen}).content.decode()
    rows = set(re.findall(r'<tr data-instance="(\w+)"', page))
    assert rows == {i.id for i in unknown}
    instance_page = client.get(f"/admin/history/workflowinstance/{failed.id}/change/").content.decode()
    assert f'href="/admin/?signature={failed.failure_signature_id}"' in instance_page


def test_a_knock_on_is_counted_on_the_home_page_and_its_root_named_on_the_instance_page(client, tenancy, console_user):
    retried = task_retried_state(tenancy, attempts_used=(1, 2)).instance  # failed with budget left, then for good
    first = task_unknown_state(tenancy).instance  # in review for the first time: its signature is its root
    client.force_login(console_user("olga", "operators"))
    home = client.get("/admin/").content.decode()
    current = WorkflowInstance.objects.get(pk=retried.pk)
    line = re.search(rf'<li data-signature="{current.failure_signature_id}">.*?</li>', home, re.S).group(0)
    assert "1 of 1 knock-on</span>" in line
    page = client.get(f"/admin/history/workflowinstance/{retried.id}/change/").content.decode()
    root = re.search(r'id="instance-root-signature"><code class="weave-json">(.*?)</code>', page, re.S).group(1)
    assert html.unescape(root) == current.root_signature.pattern and "is a knock-on of it" in page
    assert (
        'id="instance-root-signature"'
        not in client.get(f"/admin/history/workflowinstance/{first.id}/change/").content.decode()
    )


@override_settings(WEAVE_STALL_PAUSED_SECONDS=3600)
def test_the_home_and_the_instance_page_show_what_the_watchdog_marked_stalled(client, console_user, engine):
    with clock.moved(-dt.timedelta(hours=2)):
        paused = _started(engine)
        _control(engine, instance_pause, paused)
    pass_watchdog()
    client.force_login(console_user("olga", "operators"))
    home = client.get("/admin/").content.decode()
    assert "Stalled: 1 instance stuck outside review" in home and f'data-stalled="{paused.id}"' in home
    assert 'data-stall-reason="paused_too_long"' in home
    page = client.get(f"/admin/history/workflowinstance/{paused.id}/change/").content.decode()
    assert 'id="instance-stall"' in page and "paused longer than the bound" in page
    gauge = f'weave_stalled_instances{{namespace="{paused.namespace.name}",reason="paused_too_long"}} 1.0'
    assert gauge in metrics_text().decode()
