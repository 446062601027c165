"""Saved views: a filtered queue or instance list kept by name on the server, shared with a group."""

import re

import pytest
from django.contrib.auth.models import Group

from console.models import SavedView
from console.saved_views import view_url
from history.models import Scope
from testkit.states import task_failed_state, task_unknown_state
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def _save(client, **fields):
    data = {"name": "unknown leases", "target": "queue", "query": "review_cause=task_outcome_unknown"} | fields
    return client.post("/admin/views/save/", data)


def test_a_view_saved_for_a_group_is_listed_for_its_members_only(client, console_user):
    olga, otto, audrey = (
        console_user("olga", "operators"),
        console_user("otto", "operators"),
        console_user("audrey", "auditors"),
    )
    client.force_login(olga)
    response = _save(client, group=str(Group.objects.get(name="operators").id))
    assert response.status_code == 302 and response["Location"] == "/admin/?review_cause=task_outcome_unknown"
    for user, sees in ((olga, True), (otto, True), (audrey, False)):
        client.force_login(user)
        html = client.get("/admin/").content.decode()
        assert ('<a href="/admin/?review_cause=task_outcome_unknown">unknown leases</a>' in html) is sees, user
        if user == otto:
            assert "review queue, shared with operators, by olga" in html


def test_a_private_view_of_the_instance_list_keeps_its_filters_but_not_its_page(client, console_user):
    olga = console_user("olga", "operators")
    client.force_login(olga)
    changelist = client.get("/admin/history/workflowinstance/", {"state__exact": "NEEDS_REVIEW", "p": "2"})
    html = changelist.content.decode()
    assert 'name="query" value="state__exact=NEEDS_REVIEW"' in html and 'id="save-view"' in html
    _save(client, name="in review", target="instances", query="state__exact=NEEDS_REVIEW")
    view = SavedView.objects.get(name="in review")
    assert (view.owner, view.group, view.target) == (olga, None, "instances")
    client.force_login(console_user("otto", "operators"))
    assert 'data-view="in review"' not in client.get("/admin/").content.decode()


def test_a_bad_or_taken_name_is_refused_by_name_and_nothing_is_stored(client, console_user):
    client.force_login(console_user("olga", "operators"))
    _save(client)
    html = client.get(_save(client)["Location"]).content.decode()
    assert "View not saved — name: you already have a view named &#x27;unknown leases&#x27;" in html
    html = client.get(_save(client, name="   ")["Location"]).content.decode()
    assert "View not saved — name: This field is required." in html
    html = client.get(_save(client, name="x", group="999999")["Location"]).content.decode()
    assert "View not saved — group: Select a valid choice." in html
    assert SavedView.objects.count() == 1


def test_only_its_owner_deletes_a_view(client, console_user):
    olga = console_user("olga", "operators")
    client.force_login(olga)
    _save(client, group=str(Group.objects.get(name="operators").id))
    view = SavedView.objects.get()
    client.force_login(console_user("otto", "operators"))
    assert client.post(f"/admin/views/{view.pk}/delete/").status_code == 404
    assert client.get(f"/admin/views/{view.pk}/delete/").status_code == 405
    client.force_login(olga)
    assert client.post(f"/admin/views/{view.pk}/delete/").status_code == 302 and not SavedView.objects.exists()


def test_saving_needs_a_login(client):
    response = _save(client)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert not SavedView.objects.exists()


def test_a_saved_queue_view_shows_the_instances_the_api_query_with_the_same_filters_answers(
    client, console_user, tenancy, issue_token, api
):
    unknown = [task_unknown_state(tenancy) for _ in range(2)]
    failed = task_failed_state(tenancy)
    client.force_login(console_user("olga", "operators"))
    _save(client, query=f"review_cause=task_outcome_unknown&definition={unknown[0].definition.name}")
    html = client.get(view_url(SavedView.objects.get())).content.decode()
    shown = set(re.findall(r'<tr data-instance="(\w+)"', html))
    token = issue_token(scopes=[Scope.READ]).token
    answer = api.get(
        "/v1/workflows",
        {"state": "NEEDS_REVIEW", "review_cause": "task_outcome_unknown", "definition": unknown[0].definition.name},
        **bearer(token),
    )
    listed = {item["id"] for item in answer.json()["data"]["items"]}
    assert shown == listed == {state.instance.id for state in unknown}
    assert failed.instance.id not in shown
