"""Late evidence: a report of an attempt that lost its lease is kept, answered ``late`` and changes nothing.

States are built through the engine's and recovery's own services: a claim whose lease the
runner expired (UNKNOWN, task NEEDS_REVIEW), then ReviewTask, RetryStep and ContinuePoll as an
operator runs them.
"""

import datetime as dt
import json
import threading
from collections import Counter

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import connection
from weave_sdk import RawJSON, WeaveClient

from core import clock, exactjson
from engine.check import invariants_check
from engine.handlers import _heartbeat, claim_execute
from engine.runner import pass_lease_expiry, runner_settle
from engine.worker import task_complete, task_heartbeat
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Disposition,
    InboxRecord,
    InboxState,
    InstanceEvent,
    Operator,
    ResultEvent,
    ResultKind,
    Scope,
    Step,
    Task,
    TaskState,
)
from recovery.operations import OPERATIONS
from testkit.driver import poll_step, task_step
from tests.conftest import bearer
from tests.engine.test_concurrency import _threads
from tests.recovery.digest import assert_refused, history_digest

PAID = '{"paid":true,"amount":1.10}'  # as the worker wrote it: the evidence keeps the literal
EVIDENCE_TABLES = {ResultEvent._meta.db_table, InboxRecord._meta.db_table}
EVENT_TABLE = InstanceEvent._meta.db_table


def _rows() -> dict[str, set]:
    """Every row of every history table, as stored, by table."""
    tables = {}
    with connection.cursor() as cursor:
        for model in apps.get_app_config("history").get_models():
            table = model._meta.db_table
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            tables[table] = {repr(row) for row in cursor.fetchall()}
    return tables


def _assert_only_evidence_added(before: dict[str, set], after: dict[str, set], *, claim) -> None:
    """No row changed anywhere; the result stream and the inbox each gained one row, and the timeline
    exactly their two created events (attributed to the worker, no state of any other subject)."""
    for table, rows in before.items():
        if table in EVIDENCE_TABLES | {EVENT_TABLE}:
            assert rows <= after[table], f"{table}: a row changed"
            assert len(after[table] - rows) == (2 if table == EVENT_TABLE else 1), table
        else:
            assert after[table] == rows, f"{table} changed"
    event = _late_event(claim)
    record = InboxRecord.objects.get(source_id=event.id)
    instance_id = claim.task.source_instance_id
    added = InstanceEvent.objects.filter(instance_id=instance_id).order_by("-sequence")[:2]
    worker = ("worker", claim.attempt.worker)
    assert [
        (e.kind, e.subject_id, e.step_key, e.before, e.after, e.detail, (e.actor_kind, e.actor_id)) for e in added
    ] == [
        ("inbox.created", record.id, "a", "", InboxState.CONSUMED, Disposition.LATE_RECORDED, worker),
        ("result.created", event.id, "a", "", "", "LATE", worker),
    ]


def _lost_lease(engine, steps=None, queue="payments", input=None):
    """A claimed attempt whose lease the runner expired: attempt UNKNOWN, task and instance in review."""
    instance = engine.start(engine.define(steps or [task_step("a", max_attempts=3)]), input)
    engine.settle()
    claim = engine.claim(queue=queue, lease_seconds=5)
    clock.advance(dt.timedelta(seconds=6))
    engine.settle()
    assert Attempt.objects.get(pk=claim.attempt.id).state == AttemptState.UNKNOWN
    assert Task.objects.get(pk=claim.task.id).state == TaskState.NEEDS_REVIEW
    return engine.reload(instance), claim


def _complete(engine, claim, outcome="SUCCEEDED", result=PAID):
    """Complete ``claim`` with ``result``, JSON text parsed as the API parses it."""
    command = {"attempt_id": claim.attempt.id, "outcome": outcome, "result": exactjson.loads(result)}
    return task_complete(identity=engine.identity, task_id=claim.task.id, command=command)


_keys = iter(range(1, 10_000))


def _decide(engine, instance, operation, **fields):
    """One recovery operation with the revisions read just now, as an operator sends it."""
    instance = engine.reload(instance)
    command = {"expected_revision": str(instance.revision), "reason": "checked", "evidence_ref": "ticket:OPS-1"}
    command = exactjson.loads(exactjson.dumps(command | fields))
    return OPERATIONS[operation].service(
        identity=engine.identity, instance_id=instance.id, idempotency_key=f"late-{next(_keys)}", command=command
    )


def _review(engine, instance, task_id, conclusion="SUCCEEDED", result=None):
    task = Task.objects.get(pk=task_id)
    return _decide(
        engine,
        instance,
        "review-task",
        task_id=task.id,
        expected_task_revision=str(task.revision),
        execution_settled=True,
        conclusion=conclusion,
        result=result if result is not None else {"paid": True},
    )


def _step_decision(instance, key) -> dict:
    step = Step.objects.get(instance=instance, key=key)
    return {
        "step_key": key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
    }


def _late_event(claim) -> ResultEvent:
    return ResultEvent.objects.get(task_id=claim.task.id, late=True)


def test_a_completion_after_the_lease_was_lost_is_kept_as_late_evidence_and_changes_nothing(engine):
    instance, claim = _lost_lease(engine)
    before = _rows()
    completion = _complete(engine, claim)
    assert completion.late and completion.task.state == TaskState.NEEDS_REVIEW
    _assert_only_evidence_added(before, _rows(), claim=claim)
    event = _late_event(claim)
    task = Task.objects.get(pk=claim.task.id)
    assert (event.kind, event.outcome, event.result, event.attempt_id) == (
        ResultKind.RESULT,
        "SUCCEEDED",
        '{"paid":true,"amount":1.10}',
        claim.attempt.id,
    )
    assert (event.seq, event.task_revision) == (2, task.revision)  # after the UNKNOWN event, no revision bump
    record = InboxRecord.objects.get(source_id=event.id)
    assert (record.state, record.disposition, record.task_id) == (
        InboxState.CONSUMED,
        Disposition.LATE_RECORDED,
        task.id,
    )
    assert record.activation_id == task.source_activation_id and record.consumed_at == event.created_at
    # Nothing is left for the runner: the next passes change nothing either.
    settled = history_digest()
    engine.settle()
    assert history_digest() == settled
    assert invariants_check() == []


def test_review_task_still_works_after_late_evidence_and_keeps_it(engine):
    instance, claim = _lost_lease(engine)
    _complete(engine, claim, "FAILED", '{"error":"card declined"}')
    receipt = _review(engine, instance, claim.task.id, "FAILED", {"error": "card declined"})
    assert receipt.status == 200
    task = Task.objects.get(pk=claim.task.id)
    assert (task.state, task.review_conclusion, task.permit_held) == (TaskState.FAILED, "FAILED", False)
    stream = list(ResultEvent.objects.filter(task=task).order_by("seq").values_list("kind", "late", "outcome"))
    assert stream == [("UNKNOWN", False, ""), ("RESULT", True, "FAILED"), ("REVIEWED", False, "FAILED")]
    assert Attempt.objects.get(pk=claim.attempt.id).state == AttemptState.UNKNOWN
    engine.settle()
    activation = Activation.objects.get(pk=task.source_activation_id)
    assert activation.verified_outcome == "FAILED" and activation.state == ActivationState.NEEDS_REVIEW
    assert invariants_check() == []


def test_a_completion_of_a_task_whose_activation_was_superseded_by_retry_step_is_late(engine):
    instance, claim = _lost_lease(engine)
    _review(engine, instance, claim.task.id, "FAILED", {"error": "not charged"})
    engine.settle()
    _decide(engine, instance, "retry-step", safe_to_retry=True, **_step_decision(instance, "a"))
    step = Step.objects.get(instance=instance, key="a")
    old = Activation.objects.get(pk=claim.task.source_activation_id)
    assert step.current_activation_id != old.id and old.state == ActivationState.SUPERSEDED
    before = _rows()
    completion = _complete(engine, claim)  # the old worker finally answers, for the old activation
    assert completion.late and completion.task.state == TaskState.FAILED
    _assert_only_evidence_added(before, _rows(), claim=claim)
    assert InboxRecord.objects.get(source_id=_late_event(claim).id).disposition == Disposition.LATE_RECORDED
    new_task = Task.objects.get(retry_of_id=claim.task.id)
    assert new_task.state == TaskState.QUEUED and new_task.source_activation_id == step.current_activation_id
    engine.settle()
    assert invariants_check() == []


@pytest.mark.parametrize("again", [PAID, '{"paid":false}'], ids=["same report", "other content"])
def test_a_second_late_report_of_the_same_attempt_is_answered_the_same_and_writes_nothing(
    engine, issue_token, api, again
):
    instance, claim = _lost_lease(engine)
    api.credentials(**bearer(issue_token(scopes=[Scope.TASKS_WORK]).token))
    path = f"/v1/tasks/{claim.task.id}/complete"

    def post(result):
        body = f'{{"attempt_id":"{claim.attempt.id}","outcome":"SUCCEEDED","result":{result}}}'
        return api.post(path, data=body, content_type="application/json")

    first = post(PAID)
    assert first.status_code == 200, first.content
    assert first.json()["data"]["late"] is True and first.json()["data"]["state"] == "NEEDS_REVIEW"
    recorded = history_digest()
    second = post(again)
    assert second.status_code == 200 and second.json()["data"] == first.json()["data"]
    assert history_digest() == recorded
    assert _late_event(claim).result == PAID  # the first report is the evidence
    assert invariants_check() == []


def test_a_heartbeat_after_the_lease_was_lost_is_answered_late_and_writes_nothing(engine, issue_token, api):
    instance, claim = _lost_lease(engine)
    api.credentials(**bearer(issue_token(scopes=[Scope.TASKS_WORK]).token))
    before = history_digest()
    body = {"attempt_id": claim.attempt.id, "lease_seconds": 60}
    answer = api.post(f"/v1/tasks/{claim.task.id}/heartbeat", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 200, answer.content
    data = answer.json()["data"]
    assert data["late"] is True and data["attempt_id"] == claim.attempt.id
    assert history_digest() == before
    assert task_heartbeat(identity=engine.identity, task_id=claim.task.id, command=body).late
    assert history_digest() == before


def test_a_running_attempt_is_not_late_and_a_finished_one_is_refused_not_late(engine):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim()
    beat_command = {"attempt_id": claim.attempt.id}
    assert not task_heartbeat(identity=engine.identity, task_id=claim.task.id, command=beat_command).late
    completion = _complete(engine, claim)
    assert not completion.late and completion.task.state == TaskState.SUCCEEDED
    # Reported again after it finished normally: refused as before, nothing written, no evidence.
    error = assert_refused(lambda: _complete(engine, claim), "FAILED_PRECONDITION", field="attempt_id")
    assert "already finished SUCCEEDED" in error.message
    assert_refused(
        lambda: task_heartbeat(
            identity=engine.identity, task_id=claim.task.id, command={"attempt_id": claim.attempt.id}
        ),
        "FAILED_PRECONDITION",
        field="attempt_id",
    )
    assert not ResultEvent.objects.filter(late=True).exists()


def test_a_bad_late_completion_is_still_a_field_named_refusal(engine):
    instance, claim = _lost_lease(engine)
    command = {"attempt_id": claim.attempt.id, "outcome": "FAILED", "result": None}
    assert_refused(
        lambda: task_complete(identity=engine.identity, task_id=claim.task.id, command=command),
        "INVALID_ARGUMENT",
        field="result",
    )


def test_late_evidence_after_a_reviewed_pending_answer_does_not_block_continue_poll(engine):
    instance, claim = _lost_lease(engine, [poll_step()], queue="polls", input={"pending_rounds": 5})
    _review(engine, instance, claim.task.id, "SUCCEEDED", {"status": "pending"})
    engine.settle()
    assert _complete(engine, claim, "SUCCEEDED", '{"status":"done","round":1}').late
    receipt = _decide(engine, instance, "continue-poll", pending_confirmed=True, **_step_decision(instance, "settle"))
    assert receipt.status == 200
    activation = Activation.objects.get(pk=claim.task.source_activation_id)
    assert activation.state == ActivationState.WAITING and activation.last_round_classification == "PENDING"
    assert invariants_check() == []


def test_the_task_read_api_shows_late_evidence_beside_its_attempt(engine, issue_token, api):
    instance, claim = _lost_lease(engine)
    _complete(engine, claim)
    event = _late_event(claim)
    api.credentials(**bearer(issue_token(scopes=[Scope.READ]).token))
    answer = api.get(f"/v1/workflows/{instance.id}/tasks/{claim.task.id}")
    assert answer.status_code == 200, answer.content
    assert '"result":{"paid":true,"amount":1.10}' in answer.content.decode().replace(" ", "")
    (attempt,) = answer.json()["data"]["task"]["attempts"]
    assert attempt["id"] == claim.attempt.id and attempt["state"] == "UNKNOWN"
    assert attempt["late_evidence"] == {
        "event_id": event.id,
        "seq": 2,
        "outcome": "SUCCEEDED",
        "result": {"paid": True, "amount": 1.1},
        "recorded_at": event.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def test_the_read_api_shows_no_late_evidence_for_an_attempt_without_one(engine, issue_token, api):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.work()
    api.credentials(**bearer(issue_token(scopes=[Scope.READ]).token))
    (attempt,) = api.get(f"/v1/workflows/{instance.id}/tasks/{claim.task.id}").json()["data"]["task"]["attempts"]
    assert attempt["state"] == "SUCCEEDED" and "late_evidence" not in attempt


@pytest.fixture
def operator_client(client, engine):
    user = User.objects.create_user("olga", password="pw", is_staff=True)
    user.groups.set(Group.objects.filter(name="operators"))
    Operator.objects.create(user=user, namespace=engine.namespace, actor_id="o" * 32, queue_access="*")
    client.force_login(user)
    return client


def test_the_admin_task_page_and_the_review_task_form_show_the_late_evidence(engine, operator_client):
    instance, claim = _lost_lease(engine)
    _complete(engine, claim, "FAILED", '{"error":"card <declined>"}')
    event = _late_event(claim)
    page = operator_client.get(f"/admin/history/task/{claim.task.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="late-{claim.attempt.id}"' in html and event.id in html
    assert "{&quot;error&quot;:&quot;card &lt;declined&gt;&quot;}" in html  # the content, escaped
    task = Task.objects.get(pk=claim.task.id)
    form = operator_client.get(
        f"/admin/history/workflowinstance/{instance.id}/recovery/review-task/"
        f"?revision={engine.reload(instance).revision}&task={task.id}&task_revision={task.revision}"
    )
    assert form.status_code == 200
    html = form.content.decode()
    assert f'id="late-{claim.attempt.id}"' in html and "reported" in html and "card &lt;declined&gt;" in html
    # The operator concludes from it through the same form: preview shows it beside the change, confirm applies.
    url = f"/admin/history/workflowinstance/{instance.id}/recovery/review-task/"
    post = {
        "expected_revision": str(engine.reload(instance).revision),
        "reason": "the worker's late answer says the card was declined",
        "evidence_ref": f"late-event:{event.id}",
        "declaration": "on",
        "idempotency_key": "admin-late-1",
        "task_id": task.id,
        "expected_task_revision": str(task.revision),
        "conclusion": "FAILED",
        "result": '{"error":"card <declined>"}',
    }
    preview = operator_client.post(url, post | {"_preview": "1"}).content.decode()
    assert 'id="preview"' in preview and f'id="late-{claim.attempt.id}"' in preview
    done = operator_client.post(url, post | {"_confirm": "1"}, follow=True)
    assert "Review task applied" in done.content.decode()
    assert Task.objects.get(pk=task.id).review_conclusion == "FAILED"
    assert _late_event(claim).id == event.id and invariants_check() == []


def test_weave_check_reports_broken_late_evidence(engine):
    instance, claim = _lost_lease(engine)
    _complete(engine, claim)
    event = _late_event(claim)
    assert invariants_check() == []
    InboxRecord.objects.filter(source_id=event.id).update(state=InboxState.PENDING, disposition="")
    ResultEvent.objects.create(
        task_id=event.task_id, seq=5, kind="RESULT", outcome="SUCCEEDED", result="1", task_revision=1, late=True
    )
    codes = Counter(v.code for v in invariants_check())
    assert codes["late_event_record"] == 2  # the pending record, and the copy with none
    assert codes["late_event_attempt"] == 1  # the copy names no attempt
    assert codes["result_sequence_gap"] == 1 and codes["result_event_record"] == 1


def test_a_late_event_whose_record_is_somehow_pending_is_still_only_recorded_by_the_runner(engine):
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    claim = engine.claim(lease_seconds=5)
    clock.advance(dt.timedelta(seconds=6))
    assert pass_lease_expiry() == 1  # the UNKNOWN record is not consumed yet: the activation is still ACTIVE
    _complete(engine, claim)
    unknown = InboxRecord.objects.get(task_id=claim.task.id, state=InboxState.PENDING)
    late = InboxRecord.objects.get(source_id=_late_event(claim).id)
    # Pending and ahead of the UNKNOWN record: the consumer meets it first, with the activation in flight.
    InboxRecord.objects.filter(pk=late.id).update(
        state=InboxState.PENDING, disposition="", consumed_at=None, created_at=unknown.created_at - dt.timedelta(1)
    )
    engine.settle()
    late.refresh_from_db()
    assert (late.state, late.disposition) == (InboxState.CONSUMED, Disposition.LATE_RECORDED)
    step = Step.objects.get(instance=instance, key="a")
    assert step.state == "NEEDS_REVIEW" and step.output is None  # the UNKNOWN decided, the late answer did not
    assert Activation.objects.get(pk=claim.task.source_activation_id).state == ActivationState.NEEDS_REVIEW


def test_weave_check_reports_two_late_events_of_one_attempt(engine):
    instance, claim = _lost_lease(engine)
    _complete(engine, claim)
    event = _late_event(claim)
    ResultEvent.objects.filter(pk=event.id).update(seq=3)
    ResultEvent.objects.create(
        task_id=event.task_id,
        seq=2,
        kind="RESULT",
        outcome="FAILED",
        result="1",
        task_revision=1,
        late=True,
        attempt_id=claim.attempt.id,
    )
    codes = Counter(v.code for v in invariants_check())
    assert codes["late_event_repeated"] == 1 and codes["result_sequence_gap"] == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="real row locks: the MariaDB lane")
def test_two_late_reports_of_one_attempt_at_once_keep_one_event(engine):
    instance, claim = _lost_lease(engine)
    answers = []

    def report():
        answers.append(_complete(engine, claim))

    _threads(report, report, report)
    assert [a.late for a in answers] == [True, True, True]
    assert ResultEvent.objects.filter(task_id=claim.task.id, late=True).count() == 1
    assert invariants_check() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="real row locks: the MariaDB lane")
def test_a_completion_racing_lease_expiry_is_a_completion_or_late_evidence_never_both(engine, issue_token):
    from rest_framework.test import APIClient

    token = issue_token(scopes=[Scope.TASKS_WORK]).token
    definition = engine.define([task_step("a")])
    outcomes = Counter()
    for stagger in (0, 0.005, 0.01, 0.03, 0.1, 0.2):
        engine.start(definition)
        runner_settle()
        claim = engine.claim(lease_seconds=5)
        clock.advance(dt.timedelta(seconds=6))
        answers = []

        def complete(claim=claim, answers=answers):
            api = APIClient()
            body = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}}
            answers.append(
                api.post(
                    f"/v1/tasks/{claim.task.id}/complete",
                    data=json.dumps(body),
                    content_type="application/json",
                    **bearer(token),
                )
            )

        def expire(claim=claim, answers=answers, stagger=stagger):
            threading.Event().wait(stagger)
            while not answers and Attempt.objects.filter(pk=claim.attempt.id, state="RUNNING").exists():
                pass_lease_expiry()

        _threads(complete, expire)
        (answer,) = answers
        assert answer.status_code == 200, answer.content
        late = answer.json()["data"]["late"]
        attempt = Attempt.objects.get(pk=claim.attempt.id)
        stream = list(ResultEvent.objects.filter(task_id=claim.task.id).order_by("seq").values_list("kind", "late"))
        if late:
            assert attempt.state == AttemptState.UNKNOWN and stream == [("UNKNOWN", False), ("RESULT", True)]
        else:
            assert attempt.state == AttemptState.SUCCEEDED and stream == [("RESULT", False)]
        outcomes[late] += 1
    runner_settle()
    assert sum(outcomes.values()) == 6
    assert invariants_check() == []


def test_the_worker_loop_takes_a_late_answer_as_stop_without_error(engine):
    instance, claim = _lost_lease(engine)
    completion = claim_execute(identity=engine.identity, claim=claim)
    assert completion.late and _late_event(claim).result == "{}"  # demo.echo answered its input


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_thread_stops_on_a_late_answer(engine):
    instance, claim = _lost_lease(engine)
    returned = []

    def beat():
        _heartbeat(engine.identity, claim, 1, threading.Event())  # beats every third of a second
        returned.append(True)

    beats = threading.Thread(target=beat, daemon=True)
    beats.start()
    beats.join(timeout=10)
    assert returned == [True]  # it returned by itself, without error: nobody set its stop event
    assert Attempt.objects.get(pk=claim.attempt.id).state == AttemptState.UNKNOWN


@pytest.mark.django_db(transaction=True)
def test_the_sdk_worker_calls_answer_late_after_a_lost_lease(engine, issue_token, live_server):
    token = issue_token(scopes=[Scope.TASKS_WORK, Scope.READ]).token
    instance = engine.start(engine.define([task_step("a", max_attempts=3)]))
    engine.settle()
    with WeaveClient(live_server.url, token) as client:
        claim = client.claim_task("payments", worker="sdk-worker", lease_seconds=5)
        assert claim.claimed and claim.attempt.number == 1
        assert client.heartbeat_task(claim.task.id, attempt_id=claim.attempt.id, lease_seconds=5).late is False
        clock.advance(dt.timedelta(seconds=6))
        engine.settle()
        assert client.heartbeat_task(claim.task.id, attempt_id=claim.attempt.id).late is True
        done = client.complete_task(
            claim.task.id, attempt_id=claim.attempt.id, outcome="SUCCEEDED", result=RawJSON(PAID)
        )
        assert done.late is True and done.state == "NEEDS_REVIEW"
        (attempt,) = client.get_workflow_task(instance.id, claim.task.id).task.attempts
        assert attempt.state == "UNKNOWN" and attempt.late_evidence.result == RawJSON(PAID)
