"""The instance page's "Attention and notes" box, its three POST-only actions, and what the review queue shows."""

import re
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.attention import queue_attention
from console.queue import QueueRow
from history.models import Note, ReviewAttention, WorkflowInstance, WorkflowOperation
from testkit.states import task_failed_state, task_unknown_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def review(tenancy):
    return task_unknown_state(tenancy)


def _page(client, instance_id: str) -> str:
    response = client.get(f"/admin/history/workflowinstance/{instance_id}/change/")
    assert response.status_code == 200
    return response.content.decode()


def _act(client, instance_id: str, action: str, data=None):
    """POST one action; (its answer, the messages the page it redirects to shows)."""
    response = client.post(f"/admin/history/workflowinstance/{instance_id}/attention/{action}/", data or {})
    if response.status_code != 302:
        return response, []
    page = client.get(response["Location"]).content.decode()
    return response, [unescape(m) for m in re.findall(r'<li class="(?:success|error)">(.*?)</li>', page)]


def _box(html: str) -> str:
    return html.split('id="attention"')[1].split("</section>")[0]


def _key(html: str) -> str:
    return re.search(r'name="idempotency_key" value="([^"]+)"', _box(html)).group(1)


def test_an_operator_acknowledges_assigns_and_notes_and_the_instance_does_not_move(client, console_user, review):
    olga = console_user("olga", "operators")
    bob = console_user("bob", "operators").weave_operator.actor_id
    client.force_login(olga)
    instance = review.instance
    html = _page(client, instance.id)
    assert "not yet" in _box(html) and 'id="acknowledge"' in html
    assert re.findall(r'<option value="([^"]*)"[^>]*>([^<]+)</option>', _box(html).split('id="assign-form"')[1])[
        :3
    ] == [
        ("", "unassigned"),
        (bob, "bob"),
        (olga.weave_operator.actor_id, "olga"),
    ]

    response, said = _act(client, instance.id, "acknowledge")
    assert response.status_code == 302 and response["Location"].endswith(f"/{instance.id}/change/#attention")
    assert said == ["Review acknowledged."]
    assert _act(client, instance.id, "acknowledge")[1] == ["The review was already acknowledged: nothing changed."]
    assert _act(client, instance.id, "assign", {"assignee": bob})[1] == ["Review assigned."]
    key = _key(_page(client, instance.id))
    assert _act(client, instance.id, "note", {"text": "provider: pending", "idempotency_key": key})[1] == [
        "Note added."
    ]
    first = Note.objects.get(workflow_id=instance.id)
    correction = {
        "text": "provider: PAID",
        "evidence_ref": "ticket:OPS-1",
        "corrects": first.id,
        "idempotency_key": "k2",
    }
    _act(client, instance.id, "note", correction)

    box = _box(_page(client, instance.id))
    assert "by <strong data-acknowledged-by>olga (operators)</strong>" in box
    assert "<strong data-assignee>bob (operators)</strong>" in box and "by olga (operators)" in box
    assert f'data-corrects="{first.id}"' in box and "<del>provider: pending</del>" in box
    assert box.index("provider: PAID") < box.index('data-note="' + first.id)  # newest first
    assert "ticket:OPS-1" in box and 'id="acknowledge"' not in box
    after = WorkflowInstance.objects.get(pk=instance.id)
    assert (after.revision, after.control_revision, after.state) == (
        instance.revision,
        instance.control_revision,
        instance.state,
    )
    actions = WorkflowOperation.objects.filter(workflow_id=instance.id, action__in=["workflow.note", "workflow.assign"])
    assert actions.count() == 3 and all(a.request_id for a in actions)


def test_a_double_submitted_note_is_added_once(client, console_user, review):
    client.force_login(console_user("olga", "operators"))
    post = {"text": "seen", "idempotency_key": _key(_page(client, review.instance.id))}
    _act(client, review.instance.id, "note", post)
    assert _act(client, review.instance.id, "note", post)[1] == [
        "This note was already added: nothing was added twice."
    ]
    assert Note.objects.filter(workflow_id=review.instance.id).count() == 1


@pytest.mark.parametrize(
    ("action", "post", "field"),
    [
        ("note", {"text": "", "idempotency_key": "k"}, "text"),
        ("note", {"text": "a\u202eb", "idempotency_key": "k"}, "text"),
        ("note", {"text": "ok", "evidence_ref": "two words", "idempotency_key": "k"}, "evidence_ref"),
        ("note", {"text": "ok", "corrects": "e" * 32, "idempotency_key": "k"}, "corrects"),
        ("assign", {"assignee": "nobody"}, "assignee"),
    ],
)
def test_a_refusal_names_its_field_and_writes_nothing(client, console_user, review, action, post, field):
    client.force_login(console_user("olga", "operators"))
    response, said = _act(client, review.instance.id, action, post)
    assert response.status_code == 302 and len(said) == 1 and said[0].lower().startswith(f"{field}: "), said
    assert not Note.objects.exists() and not ReviewAttention.objects.exists()


def test_outside_review_notes_are_still_taken_but_nothing_is_acknowledged(client, console_user, tenancy):
    state = task_unknown_state(tenancy)
    WorkflowInstance.objects.filter(pk=state.instance.id).update(state="RUNNING", review_since=None)
    client.force_login(console_user("olga", "operators"))
    box = _box(_page(client, state.instance.id))
    assert "Not in review" in box and 'id="acknowledge"' not in box and 'id="note-form"' in box
    said = _act(client, state.instance.id, "acknowledge")[1]
    assert said == ["The instance is RUNNING, not in review"]


@pytest.mark.parametrize(("group", "status"), [("viewers", 403), ("auditors", 403)])
def test_without_the_annotate_or_recover_permission_the_box_only_reads(client, console_user, review, group, status):
    client.force_login(console_user("vic", group))
    box = _box(_page(client, review.instance.id))
    assert "<form" not in box and "No notes yet." in box
    for action in ("acknowledge", "assign", "note"):
        assert _act(client, review.instance.id, action, {"text": "x", "idempotency_key": "k"})[0].status_code == status
    assert not Note.objects.exists() and not ReviewAttention.objects.exists()


def test_the_actions_answer_only_post(client, console_user, review):
    client.force_login(console_user("olga", "operators"))
    for action in ("acknowledge", "assign", "note"):
        assert (
            client.get(f"/admin/history/workflowinstance/{review.instance.id}/attention/{action}/").status_code == 405
        )
    assert _act(client, review.instance.id, "bogus")[0].status_code == 404


def test_the_queue_shows_who_acknowledged_who_is_assigned_and_the_notes_count(client, console_user, tenancy):
    unknown, failed = task_unknown_state(tenancy).instance, task_failed_state(tenancy).instance
    olga = console_user("olga", "operators")
    bob = console_user("bob", "operators").weave_operator.actor_id
    client.force_login(olga)
    _act(client, unknown.id, "acknowledge")
    _act(client, unknown.id, "assign", {"assignee": bob})
    for n in (1, 2):
        _act(client, unknown.id, "note", {"text": f"note {n}", "idempotency_key": f"k{n}"})
    html = client.get("/admin/").content.decode()
    row = html.split(f'data-instance="{unknown.id}"')[1].split("</tr>")[0]
    assert "ack by olga" in row and "assigned to bob" in row and 'data-notes="2">2 notes' in row
    other = html.split(f'data-instance="{failed.id}"')[1].split("</tr>")[0]
    assert "not acknowledged" in other and "data-notes" not in other and "assigned to" not in other


def test_the_queue_reads_attention_and_notes_in_two_queries_whatever_its_length(client, console_user, tenancy):
    instances = [task_unknown_state(tenancy).instance for _ in range(3)]
    client.force_login(console_user("olga", "operators"))
    for instance in instances:
        _act(client, instance.id, "acknowledge")
        _act(client, instance.id, "note", {"text": "seen", "idempotency_key": f"k-{instance.id}"})
    for count in (1, 3):
        rows = [
            QueueRow(instance=WorkflowInstance.objects.get(pk=i.id), age="", next_operation=None) for i in instances
        ]
        with CaptureQueriesContext(connection) as captured:
            queue_attention(rows[:count], tenancy[0].id)
        assert len(captured) == 2
        assert all(row.acknowledged_by == "olga" and row.notes == 1 for row in rows[:count])


def _choices(html: str) -> list[str]:
    return re.findall(r'<option value="([^"]*)"', _box(html).split('id="assign-form"')[1].split("</form>")[0])


def test_only_logins_that_could_recover_the_instance_are_offered_and_any_other_is_refused_on_its_field(
    client, console_user, review
):
    olga = console_user("olga", "operators")
    anna = console_user("anna", "approvers")
    outsiders = [
        console_user("vic", "viewers"),
        console_user("audrey", "auditors"),
        console_user("other-queues", "operators", queues=["refunds"]),
    ]
    retired = console_user("retired", "operators")
    User.objects.filter(pk=retired.pk).update(is_active=False)
    not_staff = console_user("not-staff", "operators")
    User.objects.filter(pk=not_staff.pk).update(is_staff=False)
    outsiders += [retired, not_staff]
    client.force_login(olga)
    assert _choices(_page(client, review.instance.id)) == [
        "",
        anna.weave_operator.actor_id,
        olga.weave_operator.actor_id,
    ]
    for outsider in outsiders:
        response, said = _act(client, review.instance.id, "assign", {"assignee": outsider.weave_operator.actor_id})
        assert response.status_code == 302 and said == [
            f"Assignee: Select a valid choice. {outsider.weave_operator.actor_id} is not one of the available choices."
        ], outsider.username
    assert not ReviewAttention.objects.exists()
    assert _act(client, review.instance.id, "assign", {"assignee": anna.weave_operator.actor_id})[1] == [
        "Review assigned."
    ]
