"""Acknowledge, assign and note: audited, visible through the API, and never a change of the engine's state."""

import hashlib
import json

import jsonschema
import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection

from core import limits
from engine.check import invariants_check
from history.annotations import note_add, review_acknowledge, review_assign
from history.models import (
    InstanceEvent,
    Note,
    Operator,
    ReviewAttention,
    Scope,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.annotations import review_attention_of
from recovery.operations import instance_continue, step_retry
from testkit import states
from testkit.driver import Engine, task_step
from tests.api.test_openapi import Described, _operation
from tests.conftest import bearer
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db

# What annotating may write: the notes and attention themselves, their audit rows and timeline events, the receipts.
ANNOTATION_TABLES = {
    Note,
    ReviewAttention,
    WorkflowOperation,
    InstanceEvent,
    apps.get_model("history.IdempotencyReceipt"),
}
ALICE, BOB = "a1" * 16, "b2" * 16


def engine_digest() -> str:
    """Every row of every history table annotating may not write: equal digests mean the engine's rows are as
    they were, every state and revision included."""
    digest = hashlib.sha256()
    with connection.cursor() as cursor:
        for model in sorted(apps.get_app_config("history").get_models(), key=lambda m: m._meta.db_table):
            if model in ANNOTATION_TABLES:
                continue
            table, pk = (connection.ops.quote_name(n) for n in (model._meta.db_table, model._meta.pk.column))
            cursor.execute(f"SELECT * FROM {table} ORDER BY {pk}")
            digest.update(table.encode() + repr(cursor.fetchall()).encode())
    return digest.hexdigest()


def revisions(state) -> dict:
    """The instance's revision and control_revision, and every step's, activation's and task's revision."""
    state.fresh()
    rows = [state.instance, *state.steps.values(), *state.activations, *state.tasks]
    return {
        (type(row).__name__, row.pk): (row.revision, getattr(row, "control_revision", None), row.state) for row in rows
    }


@pytest.fixture
def review(tenancy):
    """An instance in review (its task's lease expired), and two operators of the namespace."""
    for name, actor in (("alice", ALICE), ("bob", BOB)):
        user = User.objects.create_user(name, is_staff=True)
        Operator.objects.create(user=user, namespace=tenancy[0], actor_id=actor, queue_access="*")
    return states.task_unknown_state(tenancy)


@pytest.fixture
def annotator(issue_token):
    return issue_token(scopes=[Scope.ANNOTATE], actor_id=ALICE).token


@pytest.fixture
def send(api):
    """send(method, path, token, body=None, key=None) → (status, parsed answer)."""

    def do(method, path, token, body=None, key=None):
        headers = bearer(token) | ({"HTTP_IDEMPOTENCY_KEY": key} if key else {})
        if method == "GET":
            response = api.get(path, **headers)
        else:
            response = api.post(path, data=json.dumps(body), content_type="application/json", **headers)
        return response.status_code, json.loads(response.content), response

    return do


def _path(state, what: str) -> str:
    return f"/v1/workflows/{state.instance.id}/{what}"


# ---- notes ---------------------------------------------------------------------------------------------------


def test_notes_are_added_listed_newest_first_and_paged_with_their_corrections(review, annotator, send, issue_token):
    reader = issue_token(scopes=[Scope.READ]).token
    first = send("POST", _path(review, "notes"), annotator, {"text": "provider says pending"}, "n-1")
    assert first[0] == 201
    note = first[1]["data"]
    assert note["text"] == "provider says pending" and note["author"] == ALICE and "corrects" not in note
    body = {"text": "provider says PAID, not pending", "evidence_ref": "ticket:OPS-9", "corrects": note["id"]}
    second = send("POST", _path(review, "notes"), annotator, body, "n-2")[1]["data"]
    assert second["corrects"] == note["id"] and second["evidence_ref"] == "ticket:OPS-9"

    status, page, _ = send("GET", _path(review, "notes") + "?limit=1", reader)
    assert status == 200 and [n["id"] for n in page["data"]["items"]] == [second["id"]]
    assert page["data"]["revision"] == str(review.instance.revision)
    cursor = page["data"]["next_cursor"]
    rest = send("GET", _path(review, "notes") + f"?limit=1&cursor={cursor}", reader)[1]["data"]
    assert [n for n in rest["items"]] == [note] and "next_cursor" not in rest
    # The note that was corrected is kept exactly as written.
    assert Note.objects.get(pk=note["id"]).text == "provider says pending"


def test_a_correction_must_name_an_earlier_note_of_the_same_instance(review, tenancy, annotator, send):
    other = states.task_failed_state(tenancy)
    elsewhere = send("POST", _path(other, "notes"), annotator, {"text": "on another instance"}, "n-1")[1]["data"]
    before = Note.objects.count()
    for corrects in (elsewhere["id"], "e" * 32):
        status, answer, _ = send(
            "POST", _path(review, "notes"), annotator, {"text": "correction", "corrects": corrects}, f"c-{corrects}"
        )
        assert (status, answer["error"]["code"], answer["error"]["field"]) == (404, "NOT_FOUND", "corrects")
    assert Note.objects.count() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": "   "}, "text"),
        ({"text": "x" * (limits.MAX_NOTE_TEXT + 1)}, "text"),
        ({"text": "hidden\u202eoverride"}, "text"),
        ({"text": 7}, "text"),
        ({"text": "ok", "evidence_ref": "with space"}, "evidence_ref"),
        ({"text": "ok", "corrects": "not-an-id"}, "corrects"),
        ({"text": "ok", "author": ALICE}, "author"),
    ],
)
def test_a_malformed_note_is_refused_naming_the_field_and_writes_nothing(review, tenancy, body, field):
    identity = Engine(*tenancy).identity
    assert_refused(
        lambda: note_add(identity=identity, instance_id=review.instance.id, command=body, idempotency_key="k-1"),
        "INVALID_ARGUMENT",
        field=field,
    )


def test_a_note_of_the_longest_length_is_kept(review, annotator, send):
    text = "x" * limits.MAX_NOTE_TEXT
    assert send("POST", _path(review, "notes"), annotator, {"text": text}, "n-long")[0] == 201
    assert Note.objects.get(workflow_id=review.instance.id).text == text


def test_a_replayed_note_answers_the_same_text_and_another_command_under_its_key_is_refused(review, annotator, send):
    _, first, _ = send("POST", _path(review, "notes"), annotator, {"text": "seen it"}, "n-1")
    status, again, response = send("POST", _path(review, "notes"), annotator, {"text": "seen it"}, "n-1")
    assert status == 201 and again["data"] == first["data"] and response["Idempotent-Replayed"] == "true"
    status, other, _ = send("POST", _path(review, "notes"), annotator, {"text": "another"}, "n-1")
    assert (status, other["error"]["code"]) == (409, "ALREADY_EXISTS")
    assert Note.objects.filter(workflow_id=review.instance.id).count() == 1


# ---- scopes --------------------------------------------------------------------------------------------------


def test_a_read_only_token_reads_notes_but_may_not_write_and_annotate_or_recover_may(review, send, issue_token):
    reader = issue_token(scopes=[Scope.READ]).token
    for what, body in (("notes", {"text": "no"}), ("acknowledge", {}), ("assign", {"assignee": BOB})):
        status, answer, _ = send("POST", _path(review, what), reader, body, f"r-{what}")
        assert (status, answer["error"]["code"]) == (403, "PERMISSION_DENIED"), what
    assert not Note.objects.exists() and not ReviewAttention.objects.exists()
    for n, scope in enumerate((Scope.ANNOTATE, Scope.RECOVER)):
        token = issue_token(scopes=[scope]).token
        assert send("POST", _path(review, "notes"), token, {"text": f"by {scope}"}, f"s-{n}")[0] == 201
        assert send("POST", _path(review, "acknowledge"), token, {})[0] == 200
        assert send("POST", _path(review, "assign"), token, {"assignee": BOB if n else ""})[0] == 200
    annotate_only = issue_token(scopes=[Scope.ANNOTATE]).token
    status, answer, _ = send("GET", _path(review, "notes"), annotate_only)
    assert (status, answer["error"]["code"]) == (403, "PERMISSION_DENIED")


# ---- acknowledge and assign ----------------------------------------------------------------------------------


def test_acknowledging_twice_is_one_acknowledgement_and_one_audit(review, annotator, send, issue_token):
    first = send("POST", _path(review, "acknowledge"), annotator, {})[1]["data"]
    assert first["acknowledged_by"] == ALICE and first["workflow_id"] == review.instance.id
    someone_else = issue_token(scopes=[Scope.RECOVER], actor_id=BOB).token
    assert send("POST", _path(review, "acknowledge"), someone_else, {})[1]["data"] == first
    audits = WorkflowOperation.objects.filter(workflow_id=review.instance.id, action="workflow.acknowledge")
    assert audits.count() == 1 and audits.get().before == {k: first[k] for k in ("workflow_id", "review_since")}
    listed = send("GET", _path(review, "notes"), issue_token(scopes=[Scope.READ]).token)[1]["data"]
    assert listed["attention"] == first


def test_assign_names_an_operator_of_the_namespace_or_unassigns(review, annotator, send, tenancy):
    assigned = send("POST", _path(review, "assign"), annotator, {"assignee": BOB})[1]["data"]
    assert (assigned["assignee"], assigned["assigned_by"]) == (BOB, ALICE)
    again = send("POST", _path(review, "assign"), annotator, {"assignee": BOB})[1]["data"]
    assert again == assigned
    # An actor id's shape is syntax (the schema states it); whether an operator of the namespace has it is a row.
    for assignee in ("a token's actor", BOB.upper(), BOB[:31], 5, None):
        status, answer, _ = send("POST", _path(review, "assign"), annotator, {"assignee": assignee})
        assert (status, answer["error"]["code"], answer["error"]["field"]) == (400, "INVALID_ARGUMENT", "assignee")
    status, answer, _ = send("POST", _path(review, "assign"), annotator, {"assignee": "f" * 32})
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (404, "NOT_FOUND", "assignee")
    for body, field in (({}, "assignee"), ({"assignee": BOB, "why": "x"}, "why")):
        assert send("POST", _path(review, "assign"), annotator, body)[1]["error"]["field"] == field
    status, answer, _ = send("POST", _path(review, "acknowledge"), annotator, {"extra": 1})
    assert (status, answer["error"]["field"]) == (400, "extra")
    unassigned = send("POST", _path(review, "assign"), annotator, {"assignee": ""})[1]["data"]
    assert {"assignee", "assigned_by", "assigned_at"}.isdisjoint(unassigned)
    actions = WorkflowOperation.objects.filter(workflow_id=review.instance.id, action="workflow.assign")
    assert [(a.before.get("assignee"), a.after.get("assignee")) for a in actions.order_by("created_at", "id")] == [
        (None, BOB),
        (BOB, None),
    ]


def test_acknowledge_and_assign_are_refused_outside_review_and_write_nothing(tenancy):
    engine = Engine(*tenancy)
    running = engine.start(engine.define([task_step("charge")]))
    for call in (
        lambda: review_acknowledge(identity=engine.identity, instance_id=running.id),
        lambda: review_assign(identity=engine.identity, instance_id=running.id, assignee=""),
    ):
        assert_refused(call, "FAILED_PRECONDITION")
    # A note is no decision on a review: any visible instance takes one.
    command = {"text": "started by hand, see OPS-9"}
    assert (
        note_add(identity=engine.identity, instance_id=running.id, command=command, idempotency_key="k").status == 201
    )


def test_a_new_review_starts_unacknowledged_and_unassigned(tenancy):
    engine = Engine(*tenancy)
    state = states.task_failed_state(tenancy, attempts_used=1)
    review_acknowledge(identity=engine.identity, instance_id=state.instance.id)
    Operator.objects.create(user=User.objects.create_user("bob"), namespace=tenancy[0], actor_id=BOB, queue_access="*")
    review_assign(identity=engine.identity, instance_id=state.instance.id, assignee=BOB)
    retry = states._decision(state.instance, state.step.key, "retry") | {"safe_to_retry": True}
    step_retry(identity=engine.identity, instance_id=state.instance.id, idempotency_key="retry", command=retry)
    decision = states._instance_decision(state.instance, "continue") | {"review_resolved": True}
    instance_continue(identity=engine.identity, instance_id=state.instance.id, idempotency_key="go", command=decision)
    states._passes("continuations")
    states._answered(engine, "FAILED", {"error": "declined"})
    instance = WorkflowInstance.objects.get(pk=state.instance.id)
    assert instance.state == "NEEDS_REVIEW"
    stale = ReviewAttention.objects.get(pk=instance.id)
    assert stale.review_since != instance.review_since and stale.acknowledged_by
    assert review_attention_of([instance]) == {}
    fresh = review_assign(identity=engine.identity, instance_id=instance.id, assignee=BOB)
    assert "acknowledged_by" not in fresh and fresh["assignee"] == BOB


# ---- never the engine's state --------------------------------------------------------------------------------


def test_notes_acknowledgement_and_assignment_change_no_state_or_revision(review, annotator, send, tenancy):
    revisions_before, engine_before = revisions(review), engine_digest()
    note = send("POST", _path(review, "notes"), annotator, {"text": "checking with the provider"}, "n-1")[1]["data"]
    send("POST", _path(review, "notes"), annotator, {"text": "provider: paid", "corrects": note["id"]}, "n-2")
    send("POST", _path(review, "acknowledge"), annotator, {})
    send("POST", _path(review, "assign"), annotator, {"assignee": BOB})
    send("POST", _path(review, "assign"), annotator, {"assignee": ""})
    assert revisions(review) == revisions_before
    assert engine_digest() == engine_before
    assert invariants_check() == []


def test_each_write_is_a_workflow_audit_with_its_timeline_event(review, annotator, send):
    w = review.instance.id
    note = send("POST", _path(review, "notes"), annotator, {"text": "seen", "evidence_ref": "ticket:1"}, "n-1")
    send("POST", _path(review, "acknowledge"), annotator, {})
    send("POST", _path(review, "assign"), annotator, {"assignee": BOB})
    audits = list(review.operations().order_by("created_at", "id"))
    assert [a.action for a in audits] == ["workflow.note", "workflow.acknowledge", "workflow.assign"]
    assert audits[0].after == note[1]["data"] and audits[0].before is None and audits[0].evidence_ref == "ticket:1"
    assert {a.actor_id for a in audits} == {ALICE} and all(a.request_id for a in audits)
    events = InstanceEvent.objects.filter(instance_id=w, kind="audit.created", audit_id__in=[a.id for a in audits])
    assert sorted(e.detail for e in events) == sorted(a.action for a in audits)
    assert {(e.actor_kind, e.actor_id) for e in events} == {("client", ALICE)}


def test_every_answer_and_error_matches_its_documented_schema(review, api, annotator, issue_token, openapi_doc):
    posts = Described(api, openapi_doc, annotator)
    ghost = f"/v1/workflows/{'e' * 32}"
    note = posts.post(
        "add_workflow_note", _path(review, "notes"), {"text": "seen", "evidence_ref": "t:1"}, 201, key="1"
    )
    posts.post("add_workflow_note", _path(review, "notes"), {"text": "seen", "evidence_ref": "t:1"}, 201, key="1")
    posts.post("add_workflow_note", _path(review, "notes"), {"text": "other"}, 409, key="1")
    posts.post("add_workflow_note", _path(review, "notes"), {"text": ""}, 400, key="2")
    correction = {"text": "fixed", "corrects": note["data"]["id"]}
    posts.post("add_workflow_note", _path(review, "notes"), correction, 201, key="3")
    posts.post("add_workflow_note", _path(review, "notes"), correction | {"corrects": "e" * 32}, 404, key="4")
    posts.post("add_workflow_note", f"{ghost}/notes", {"text": "x"}, 404, key="5")
    posts.post("acknowledge_workflow", _path(review, "acknowledge"), {}, 200)
    posts.post("acknowledge_workflow", f"{ghost}/acknowledge", {}, 404)
    posts.post("assign_workflow", _path(review, "assign"), {"assignee": BOB}, 200)
    posts.post("assign_workflow", _path(review, "assign"), {"assignee": "f" * 32}, 404)
    posts.post("assign_workflow", _path(review, "assign"), {"assignee": "F" * 32}, 400)
    posts.post("assign_workflow", _path(review, "assign"), {"assignee": ""}, 403, token=issue_token().token)
    read = api.get(_path(review, "notes"), **bearer(issue_token().token))
    _, _, listed = _operation(openapi_doc, "list_workflow_notes")
    schema = posts._schema(listed["responses"]["200"])
    jsonschema.validate(json.loads(read.content), schema)
    assert set(json.loads(read.content)["data"]) == {"workflow_id", "revision", "attention", "items"}


@pytest.fixture
def openapi_doc(api):
    return json.loads(api.get("/v1/openapi.json").content)
