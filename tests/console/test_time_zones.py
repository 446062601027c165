"""Times to the second with their zone, in the zone each operator chose, UTC on hover."""

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest

from history.models import Operator
from testkit.states import task_unknown_state

pytestmark = pytest.mark.django_db


def _page(client, instance_id) -> str:
    return client.get(f"/admin/history/workflowinstance/{instance_id}/change/").content.decode()


def test_an_operator_chooses_a_zone_and_every_time_follows_it_with_utc_on_hover(client, console_user, tenancy):
    state = task_unknown_state(tenancy)
    user = console_user("olga", "operators")
    client.force_login(user)
    updated = state.instance.updated_at.astimezone(dt.UTC)
    html = _page(client, state.instance.id)
    assert f'title="{updated:%Y-%m-%d %H:%M:%S} UTC">{updated:%Y-%m-%d %H:%M:%S} UTC</time>' in html
    assert 'id="preferences-link">Times in UTC</a>' in html

    response = client.post("/admin/preferences/", {"time_zone": "Asia/Tokyo"})
    assert response.status_code == 302 and Operator.objects.get(user=user).time_zone == "Asia/Tokyo"
    html = _page(client, state.instance.id)
    local = updated.astimezone(ZoneInfo("Asia/Tokyo"))
    assert f'title="{updated:%Y-%m-%d %H:%M:%S} UTC">{local:%Y-%m-%d %H:%M:%S} JST</time>' in html
    changelist = client.get("/admin/history/workflowinstance/").content.decode()
    assert f"{local:%Y-%m-%d %H:%M:%S} JST" in changelist


def test_a_zone_that_does_not_exist_is_refused_on_its_field(client, console_user):
    user = console_user("olga", "operators")
    client.force_login(user)
    html = client.post("/admin/preferences/", {"time_zone": "Mars/Olympus"}).content.decode()
    assert re.search(r"time_zone.*Select a valid choice", html, re.S)
    assert Operator.objects.get(user=user).time_zone == "UTC"


def test_a_login_without_an_operator_identity_has_no_preferences(admin_client):
    assert admin_client.get("/admin/preferences/").status_code == 403
