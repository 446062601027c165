"""Pause, resume, cancel, notes, acknowledgement, assignment and the caller's credential, against MockTransport."""

import json

import pytest
from weave_sdk import InvalidArgument, WeaveResponseError

from tests.sdk.mock import Server, client_for

W, G, N, ALICE, BOB = "1" * 32, "9" * 32, "8" * 32, "a1" * 16, "b2" * 16
SUMMARY = {
    "id": W,
    "workflow_id": W,
    "definition": {"name": "pay", "version": 2},
    "state": "RUNNING",
    "paused": True,
    "revision": "18446744073709551615",
    "control_revision": "4",
    "business_key": "",
    "created_at": "2026-09-18T08:00:00Z",
}
NOTE = {
    "id": N,
    "workflow_id": W,
    "text": "provider says PAID",
    "evidence_ref": "ticket:OPS-9",
    "corrects": G,
    "author": ALICE,
    "created_at": "2026-09-18T08:00:00.000001Z",
}
ATTENTION = {
    "workflow_id": W,
    "review_since": "2026-09-18T07:00:00Z",
    "acknowledged_by": ALICE,
    "acknowledged_at": "2026-09-18T07:30:00Z",
}
NOTES = {"workflow_id": W, "revision": "6", "attention": ATTENTION, "items": [NOTE], "next_cursor": "n:1"}
SELF = {"credential_id": G, "namespace_id": N, "actor_id": ALICE, "scopes": ["workflows:read"], "queues": "*"}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.pause_workflow("W" * 32, expected_control_revision=1), "id"),
        (lambda c: c.pause_workflow(W, expected_control_revision=0), "expected_control_revision"),
        (lambda c: c.resume_workflow(W, expected_control_revision=2**64), "expected_control_revision"),
        (lambda c: c.resume_workflow(W, expected_control_revision="3"), "expected_control_revision"),
        (lambda c: c.cancel_workflow(W, expected_control_revision=True), "expected_control_revision"),
        (lambda c: c.cancel_workflow(W, expected_control_revision=1, reason=""), "reason"),
        (lambda c: c.cancel_workflow(W, expected_control_revision=1, reason=" \n"), "reason"),
        (lambda c: c.pause_workflow(W, expected_control_revision=1, reason="r" * 1025), "reason"),
        (lambda c: c.list_workflow_notes("nope"), "id"),
        (lambda c: c.list_workflow_notes(W, limit=101), "limit"),
        (lambda c: c.list_workflow_notes(W, cursor="c" * 1025), "cursor"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n 1", text="seen"), "Idempotency-Key"),
        (lambda c: c.add_workflow_note(W, idempotency_key="k" * 129, text="seen"), "Idempotency-Key"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="   "), "text"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="t" * 4001), "text"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="seen", evidence_ref="ticket 9"), "evidence_ref"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="seen", evidence_ref=""), "evidence_ref"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="seen", evidence_ref="e" * 513), "evidence_ref"),
        (lambda c: c.add_workflow_note(W, idempotency_key="n1", text="seen", corrects="note-1"), "corrects"),
        (lambda c: c.acknowledge_workflow("A" * 32), "id"),
        (lambda c: c.assign_workflow(W, assignee="bob"), "assignee"),
        (lambda c: c.assign_workflow(W, assignee=None), "assignee"),
        (lambda c: c.assign_workflow("", assignee=BOB), "id"),
    ],
)
def test_bad_ids_revisions_texts_and_keys_are_refused_before_sending(call, field):
    server = Server((200, {}))
    with pytest.raises(InvalidArgument) as refused:
        call(client_for(server))
    assert (refused.value.field, refused.value.status) == (field, None)
    assert server.requests == []


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_a_control_command_posts_the_revision_as_a_decimal_string_and_decodes_the_instance(action):
    server = Server((200, SUMMARY), (200, SUMMARY | {"stop_kind": "CANCEL", "deadline_at": "2026-09-19T08:00:00Z"}))
    client = client_for(server)
    control = getattr(client, f"{action}_workflow")
    summary = control(W, expected_control_revision=3, reason="maintenance window")
    assert (summary.revision, summary.control_revision, summary.paused) == (2**64 - 1, 4, True)
    assert (summary.definition.version, summary.stop_kind, summary.deadline_at) == (2, None, None)
    assert control(W, expected_control_revision=4).stop_kind == "CANCEL"
    assert [r.url.path for r in server.requests] == [f"/v1/workflows/{W}/{action}"] * 2
    assert [r.content for r in server.requests] == [
        b'{"expected_control_revision":"3","reason":"maintenance window"}',
        b'{"expected_control_revision":"4"}',
    ]
    assert all("Idempotency-Key" not in r.headers for r in server.requests)


@pytest.mark.parametrize("answer", [SUMMARY | {"id": G}, SUMMARY | {"workflow_id": G}])
def test_a_control_answer_for_another_instance_is_a_response_error(answer):
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, answer))).cancel_workflow(W, expected_control_revision=1)
    assert refused.value.code == "RESPONSE_MISMATCH"


def test_a_note_is_posted_under_its_key_exactly_and_decodes_as_the_note():
    server = Server((201, NOTE))
    added = client_for(server).add_workflow_note(
        W, idempotency_key="note-1", text="provider says PAID", evidence_ref="ticket:OPS-9", corrects=G
    )
    (request,) = server.requests
    assert (request.method, request.url.path, request.headers["Idempotency-Key"]) == (
        "POST",
        f"/v1/workflows/{W}/notes",
        "note-1",
    )
    assert request.content == f'{{"text":"provider says PAID","evidence_ref":"ticket:OPS-9","corrects":"{G}"}}'.encode()
    assert (added.status, added.replayed, added.data.id, added.data.author) == (201, False, N, ALICE)
    assert added.data.created_at.microsecond == 1


@pytest.mark.parametrize(
    ("answer", "field"), [(NOTE | {"workflow_id": G}, "workflow_id"), (NOTE | {"corrects": W}, "corrects")]
)
def test_an_added_note_of_another_workflow_or_correcting_another_note_is_a_response_error(answer, field):
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((201, answer))).add_workflow_note(W, idempotency_key="n1", text="seen", corrects=G)
    assert (refused.value.code, refused.value.field) == ("RESPONSE_MISMATCH", field)


def test_the_notes_page_decodes_its_notes_attention_and_cursor():
    server = Server((200, NOTES))
    page = client_for(server).list_workflow_notes(W, limit=1, cursor="n:0")
    assert dict(server.requests[0].url.params) == {"limit": "1", "cursor": "n:0"}
    assert (page.revision, page.next_cursor, [n.id for n in page.items]) == (6, "n:1", [N])
    assert (page.items[0].corrects, page.items[0].evidence_ref) == (G, "ticket:OPS-9")
    assert (page.attention.acknowledged_by, page.attention.assignee) == (ALICE, None)
    bare = {"workflow_id": W, "revision": "6", "items": [{k: v for k, v in NOTE.items() if k != "corrects"}]}
    page = client_for(Server((200, bare))).list_workflow_notes(W)
    assert (page.attention, page.next_cursor, page.items[0].corrects) == (None, None, None)


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (NOTES | {"workflow_id": G}, "workflow_id"),
        (NOTES | {"items": [NOTE | {"workflow_id": G}]}, "items[].workflow_id"),
        (NOTES | {"attention": ATTENTION | {"workflow_id": G}}, "attention.workflow_id"),
    ],
)
def test_a_notes_page_with_another_workflows_ids_is_a_response_error(answer, field):
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, answer))).list_workflow_notes(W)
    assert (refused.value.code, refused.value.field) == ("RESPONSE_MISMATCH", field)


def test_acknowledge_posts_an_empty_command_and_assign_the_assignee_or_nothing():
    assigned = ATTENTION | {"assignee": BOB, "assigned_by": ALICE, "assigned_at": "2026-09-18T07:40:00Z"}
    server = Server((200, ATTENTION), (200, assigned), (200, ATTENTION))
    client = client_for(server)
    assert client.acknowledge_workflow(W).acknowledged_by == ALICE
    assert client.assign_workflow(W, assignee=BOB).assignee == BOB
    assert client.assign_workflow(W, assignee="").assignee is None
    assert [(r.url.path.rsplit("/", 1)[1], json.loads(r.content)) for r in server.requests] == [
        ("acknowledge", {}),
        ("assign", {"assignee": BOB}),
        ("assign", {"assignee": ""}),
    ]


@pytest.mark.parametrize("call", [lambda c: c.acknowledge_workflow(W), lambda c: c.assign_workflow(W, assignee=BOB)])
def test_an_attention_of_another_workflow_is_a_response_error(call):
    with pytest.raises(WeaveResponseError) as refused:
        call(client_for(Server((200, ATTENTION | {"workflow_id": G}))))
    assert refused.value.code == "RESPONSE_MISMATCH"


@pytest.mark.parametrize("queues", ["*", ["ledger", "payments"], []])
def test_the_credential_decodes_every_queue_or_their_names(queues):
    server = Server((200, SELF | {"queues": queues}))
    me = client_for(server).get_credential_self()
    assert (server.requests[0].method, server.requests[0].url.path) == ("GET", "/v1/credentials/self")
    assert (me.credential_id, me.actor_id, me.scopes, me.queues) == (G, ALICE, ["workflows:read"], queues)


@pytest.mark.parametrize(
    ("queues", "field"), [("payments", "data.queues"), ([7], "data.queues[0]"), (None, "data.queues")]
)
def test_a_credential_whose_queues_are_neither_every_queue_nor_names_is_a_response_error(queues, field):
    with pytest.raises(WeaveResponseError) as refused:
        client_for(Server((200, SELF | {"queues": queues}))).get_credential_self()
    assert refused.value.field == field
