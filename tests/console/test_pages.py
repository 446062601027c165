"""The console's own pages around its work: the sign-in, the error pages, the audit lists' columns, the
preferences' zone field."""

import re

import pytest
from django.template.loader import render_to_string

from console.zone import DEFAULT_ZONE
from history.models import Operator
from testkit.states import task_unknown_state
from tests.factories import ExecutionAuditFactory, SignalOperationFactory, WorkflowOperationFactory

pytestmark = pytest.mark.django_db

# The wording of Django's stock pages, which the console's own replace.
STOCK = ("Django administration", "Django site admin", "Not Found", "Server Error (500)", "Log in")


def test_the_sign_in_page_speaks_as_the_console_with_a_label_for_each_field(client):
    html = client.get("/admin/login/").content.decode()
    assert "<title>Weave console — sign in</title>" in html
    assert '<h1 id="sign-in-title">Weave console — sign in</h1>' in html
    assert '<label for="id_username"' in html and '<label for="id_password"' in html
    assert not any(words in html for words in STOCK)


def test_a_refused_sign_in_lists_its_errors(client):
    response = client.post("/admin/login/", {"username": "nobody", "password": ""})
    html = response.content.decode()
    assert "<title>Error: Weave console — sign in</title>" in html
    errors = re.search(r'<div class="errornote" id="sign-in-errors" role="alert">(.*?)</div>', html, re.S).group(1)
    assert "<li>Password: This field is required.</li>" in errors


@pytest.fixture
def debug_off(settings):
    settings.DEBUG = False


@pytest.mark.parametrize("path", ["/admin/no-such-page/", "/no-such-page"])
def test_an_unknown_page_answers_the_consoles_404_with_a_way_home(admin_client, debug_off, path):
    response = admin_client.get(path)
    html = response.content.decode()
    assert response.status_code == 404
    assert "<h1>No such page</h1>" in html and f"<code>{path}</code>" in html
    assert '<a href="/admin/">Back to the console\'s home</a>' in html
    assert not any(words in html for words in STOCK)


def test_the_500_page_renders_without_a_request_or_a_context():
    html = render_to_string("500.html")
    assert "<h1>Something failed on the server</h1>" in html
    assert '<a href="/admin/">Back to the console\'s home</a>' in html
    assert not any(words in html for words in STOCK)


AUDIT_COLUMNS = ["created", "who", "action_taken", "instance", "short_reason", "evidence"]


def _columns(html: str) -> list[str]:
    return re.findall(r'<th scope="col"\s+class="[^"]*column-(\w+)', html)


AUDITS = {
    "/admin/history/workflowoperation/": lambda tenancy, **fields: WorkflowOperationFactory(**fields),
    "/admin/history/signaloperation/": lambda tenancy, **fields: SignalOperationFactory(**fields),
    "/admin/history/executionaudit/": lambda tenancy, **fields: ExecutionAuditFactory(
        task=task_unknown_state(tenancy).tasks[-1], **fields
    ),
}


@pytest.mark.parametrize("path", AUDITS)
def test_an_audit_list_shows_few_narrow_columns_and_names_no_row_as_an_object(admin_client, tenancy, path):
    row = AUDITS[path](tenancy, reason="the ledger shows the charge " + "confirmed " * 20, evidence_ref="OPS-42")
    html = admin_client.get(path).content.decode()
    assert _columns(html) == AUDIT_COLUMNS
    assert "object (" not in html
    # The reason cut short, whole on hover; the evidence as it is.
    assert f'<span title="{row.reason}">the ledger shows the charge confirmed' in html
    assert row.reason not in html.replace(f'title="{row.reason}"', "")
    assert '<td class="field-evidence">OPS-42</td>' in html
    detail = admin_client.get(f"{path}{row.id}/change/").content.decode()
    assert "object (" not in detail and f"{row.action} by {row.actor_id} at " in detail


def test_the_workflow_audit_names_the_instance_by_its_business_key_and_step(admin_client):
    row = WorkflowOperationFactory(workflow__business_key="order-7", step_key="charge")
    html = admin_client.get("/admin/history/workflowoperation/").content.decode()
    cell = re.search(r'<td class="field-instance">(.*?)</td>', html, re.S).group(1)
    assert f'<a href="/admin/history/workflowinstance/{row.workflow_id}/change/"' in cell
    assert re.search(r">order-7 · [^<]+</a>", cell) and cell.endswith('<span class="weave-muted">charge</span>')


def _zone_field(html: str) -> str:
    return re.search(r'<input [^>]*id="id_time_zone"[^>]*>', html).group(0)


def _preferences(client, console_user, **operator):
    user = console_user("olga", "operators")
    Operator.objects.filter(user=user).update(**operator)
    client.force_login(user)
    return user


def test_the_zone_is_typed_with_every_known_zone_suggested(client, console_user):
    _preferences(client, console_user)
    html = client.get("/admin/preferences/").content.decode()
    field = _zone_field(html)
    assert 'list="time-zones"' in field and f'value="{DEFAULT_ZONE}"' in field
    assert '<option value="Europe/Berlin"></option>' in html
    # Not chosen yet: the page may offer the browser's zone (console/zone.js).
    assert "data-offer-browser-zone" in field


def test_a_chosen_zone_is_not_replaced_by_the_browsers(client, console_user):
    _preferences(client, console_user, time_zone="Asia/Tokyo")
    field = _zone_field(client.get("/admin/preferences/").content.decode())
    assert 'value="Asia/Tokyo"' in field and "data-offer-browser-zone" not in field


def test_an_unknown_zone_is_refused_with_an_error_naming_the_field(client, console_user):
    user = _preferences(client, console_user)
    html = client.post("/admin/preferences/", {"time_zone": "Europe/Berl"}).content.decode()
    assert "Time zone: Select a valid choice: Europe/Berl is not a time zone." in html
    assert 'aria-invalid="true"' in _zone_field(html)
    assert Operator.objects.get(user=user).time_zone == DEFAULT_ZONE
