"""A task's source, read on its own (workflows:read or tasks:work), and the links and late evidence of its history."""

import pytest

from core import exactjson
from core.times import format_time
from engine.worker import task_complete
from history.models import Activation, PollRound, Queue, ResultEvent, Scope, Task, WorkflowInstance
from history.selectors.tasks import TASK_NOT_FOUND
from history.tenancy import namespace_ensure
from testkit import states
from testkit.driver import Engine
from tests.conftest import bearer, error_of

LEDGER_STEP = {"key": "ship", "kind": "TASK", "after": ["charge"], "handler": "ship", "queue": "ledger"}
NOT_FOUND = (404, "NOT_FOUND", None)


def source_path(task_id: str) -> str:
    return f"/v1/tasks/{task_id}/source"


def _not_found_message(call, path, token) -> str:
    status, body = call(path, token)
    assert status == 404, body
    return body["error"]["message"]


@pytest.fixture
def failed(tenancy):
    """A TASK step whose task failed for good (engine-built): instance in review."""
    return states.task_failed_state(tenancy)


def test_a_reader_sees_where_a_task_comes_from(failed, call, reader):
    status, body = call(source_path(failed.task.id), reader)
    assert status == 200, body
    data = body["data"]
    workflow = f"/v1/workflows/{failed.instance.id}"
    activation = f"{workflow}/steps/charge/activations/{failed.activation.id}"
    assert data == {
        "task_id": failed.task.id,
        "namespace": "acme",
        "instance_id": failed.instance.id,
        "definition": {"name": failed.definition.name, "version": failed.definition.version},
        "step_key": "charge",
        "activation": {"id": failed.activation.id, "sequence": 1},
        "queue": "payments",
        "links": {
            "instance": workflow,
            "activation": activation,
            "task": f"{workflow}/tasks/{failed.task.id}",
            "source": source_path(failed.task.id),
        },
    }


def test_every_link_of_a_task_source_is_a_read_that_answers(failed, call, reader):
    _, body = call(source_path(failed.task.id), reader)
    for name, link in body["data"]["links"].items():
        assert call(link, reader)[0] == 200, name


@pytest.fixture
def two_queues(tenancy):
    """A definition whose first step runs on payments and the next on ledger; its charge task failed for good."""
    both = namespace_ensure(name="acme", application="billing", queues=["payments", "ledger"])
    return states.task_failed_state(both, steps=[states.TASK_STEP, LEDGER_STEP])


def test_a_worker_sees_the_source_of_a_task_on_its_queue_even_when_the_workflow_is_hidden_from_it(
    two_queues, call, issue_token
):
    path = source_path(two_queues.task.id)
    worker = issue_token(scopes=[Scope.TASKS_WORK], queues=["payments"]).token
    status, body = call(path, worker)
    assert status == 200, body
    assert (body["data"]["instance_id"], body["data"]["queue"]) == (two_queues.instance.id, "payments")
    # The same queue access reads nothing of the instance: its definition also names ledger.
    reader = issue_token(scopes=[Scope.READ], queues=["payments"]).token
    assert error_of(call(path, reader)) == NOT_FOUND
    assert error_of(call(f"/v1/workflows/{two_queues.instance.id}", reader)) == NOT_FOUND


def test_a_worker_of_another_queue_gets_the_unknown_tasks_answer(failed, call, issue_token):
    elsewhere = issue_token(scopes=[Scope.TASKS_WORK], queues=["ledger"]).token
    every_queue = issue_token(scopes=[Scope.TASKS_WORK]).token
    assert error_of(call(source_path(failed.task.id), elsewhere)) == NOT_FOUND
    assert _not_found_message(call, source_path(failed.task.id), elsewhere) == TASK_NOT_FOUND
    assert _not_found_message(call, source_path("e" * 32), every_queue) == TASK_NOT_FOUND


def test_a_reader_who_may_not_see_the_workflow_gets_the_unknown_tasks_answer(failed, call, issue_token):
    hidden = issue_token(scopes=[Scope.READ], queues=["ledger"]).token
    assert _not_found_message(call, source_path(failed.task.id), hidden) == TASK_NOT_FOUND


def test_either_scope_is_enough_and_the_one_that_fits_decides(two_queues, call, issue_token):
    path = source_path(two_queues.task.id)
    # Hidden as a reader (the definition names ledger too), seen as a worker of payments.
    both_on_payments = issue_token(scopes=[Scope.READ, Scope.TASKS_WORK], queues=["payments"]).token
    assert call(path, both_on_payments)[0] == 200
    # Not a worker of payments, seen as a reader of every queue.
    assert call(path, issue_token(scopes=[Scope.READ]).token)[0] == 200
    both_on_ledger = issue_token(scopes=[Scope.READ, Scope.TASKS_WORK], queues=["ledger"]).token
    assert error_of(call(path, both_on_ledger)) == NOT_FOUND


def test_a_task_of_another_namespace_is_not_found(failed, call, issue_token):
    other = states.task_failed_state(namespace_ensure(name="globex", application="billing", queues=["payments"]))
    for scope in (Scope.READ, Scope.TASKS_WORK):
        token = issue_token(scopes=[scope]).token
        assert _not_found_message(call, source_path(other.task.id), token) == TASK_NOT_FOUND
        assert call(source_path(failed.task.id), token)[0] == 200


def test_an_unknown_task_is_not_found_with_the_same_message(failed, call, reader):
    assert error_of(call(source_path("e" * 32), reader)) == NOT_FOUND
    assert _not_found_message(call, source_path("e" * 32), reader) == TASK_NOT_FOUND


def test_a_poll_query_task_shows_its_round_and_the_round_list(tenancy, call, reader):
    poll = states.poll_round_failed_state(tenancy)
    first, second = poll.tasks
    for task, number in ((first, 1), (second, 2)):
        status, body = call(source_path(task.id), reader)
        assert status == 200, body
        data = body["data"]
        named = PollRound.objects.get(activation_id=poll.activation.id, round=number)
        assert (data["step_key"], data["poll_round"]) == ("settle", {"id": named.id, "round": number})
        assert data["activation"] == {"id": poll.activation.id, "sequence": 1}
        rounds = call(data["links"]["rounds"], reader)[1]["data"]["items"]
        assert task.id in [item["task_id"] for item in rounds]


def test_a_task_step_has_no_round(failed, call, reader):
    data = call(source_path(failed.task.id), reader)[1]["data"]
    assert "poll_round" not in data and "rounds" not in data["links"]


def test_a_retried_task_names_the_task_it_retries(tenancy, call, reader):
    retried = states.task_retried_state(tenancy)
    first, second = retried.tasks
    data = call(source_path(second.id), reader)[1]["data"]
    assert (data["retry_of"], data["activation"]["sequence"]) == (first.id, 2)
    assert "retry_of" not in call(source_path(first.id), reader)[1]["data"]


def _corrupt(state, how: str) -> None:
    task = state.task
    if how == "activation names another task":
        Activation.objects.filter(id=task.source_activation_id).update(task_id="d" * 32)
    elif how == "task points to a missing activation":
        Task.objects.filter(id=task.id).update(source_activation_id="d" * 32)
    elif how == "task on another queue":
        ledger = Queue.objects.create(namespace_id=task.namespace_id, name="ledger")
        Task.objects.filter(id=task.id).update(queue=ledger)
    elif how == "poll round names another task":
        PollRound.objects.filter(task_id=task.id).update(task_id="d" * 32)
    elif how == "poll round of another instance":
        PollRound.objects.filter(task_id=task.id).update(instance_id="d" * 32)
    elif how == "instance missing":
        WorkflowInstance.objects.filter(id=state.instance.id).delete()
    else:
        raise AssertionError(how)


CORRUPTIONS = {
    "activation names another task": states.task_failed_state,
    "task points to a missing activation": states.task_failed_state,
    "task on another queue": states.task_failed_state,
    "poll round names another task": states.poll_round_failed_state,
    "poll round of another instance": states.poll_round_failed_state,
    "instance missing": states.task_failed_state,
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
@pytest.mark.parametrize("scope", [Scope.READ, Scope.TASKS_WORK])
def test_a_task_and_a_source_that_disagree_are_unavailable(tenancy, call, issue_token, how, scope):
    state = CORRUPTIONS[how](tenancy)
    _corrupt(state, how)
    token = issue_token(scopes=[scope]).token
    assert error_of(call(source_path(state.task.id), token)) == (503, "UNAVAILABLE", None)


def test_a_caller_who_may_not_see_the_task_learns_nothing_of_its_corruption(failed, call, issue_token):
    _corrupt(failed, "activation names another task")
    elsewhere = issue_token(scopes=[Scope.TASKS_WORK], queues=["ledger"]).token
    assert _not_found_message(call, source_path(failed.task.id), elsewhere) == TASK_NOT_FOUND


def test_the_task_detail_and_the_source_agree_on_a_broken_task(failed, call, reader):
    """One rule for both reads: what makes the source unavailable makes the execution history unavailable."""
    _corrupt(failed, "task on another queue")
    assert error_of(call(f"/v1/workflows/{failed.instance.id}/tasks/{failed.task.id}", reader))[0] == 503


def test_authentication_scope_and_syntax_come_first(failed, call, token_for):
    path = source_path(failed.task.id)
    assert error_of(call(path, None)) == (401, "UNAUTHENTICATED", None)
    assert error_of(call(path, token_for(Scope.AUDIT_READ)))[:2] == (403, "PERMISSION_DENIED")
    assert error_of(call(source_path("NOT-AN-ID"), token_for(Scope.AUDIT_READ)))[0] == 403
    for bad in ("A" * 32, "a" * 31, "g" * 32):
        assert error_of(call(source_path(bad), token_for(Scope.READ))) == (400, "INVALID_ARGUMENT", "task_id")
    assert error_of(call(path, token_for(Scope.READ), limit="1")) == (400, "INVALID_ARGUMENT", "limit")


def test_the_permission_refusal_names_both_scopes(failed, call, token_for):
    _, body = call(source_path(failed.task.id), token_for(Scope.AUDIT_READ))
    assert body["error"]["message"] == "this credential lacks the workflows:read or tasks:work scope"


# ---- the execution history ---------------------------------------------------------------------


@pytest.fixture
def late(tenancy):
    """An attempt whose lease the runner expired (engine-built), then its worker's completion: late evidence."""
    state = states.task_unknown_state(tenancy)
    (attempt,) = state.task.attempts.all()
    command = {"attempt_id": attempt.id, "outcome": "SUCCEEDED", "result": exactjson.loads('{"paid":true,"n":1.10}')}
    assert task_complete(identity=Engine(*tenancy).identity, task_id=state.task.id, command=command).late
    state.late_event = ResultEvent.objects.get(task_id=state.task.id, late=True)
    state.attempt = attempt
    return state


def test_the_execution_history_lists_the_late_evidence_with_time_outcome_content_and_attempt(late, api, reader):
    response = api.get(f"/v1/workflows/{late.instance.id}/tasks/{late.task.id}", **bearer(reader))
    assert response.status_code == 200, response.content
    assert b'"result":{"paid":true,"n":1.10}' in response.content
    task = response.json()["data"]["task"]
    event = late.late_event
    assert task["late_evidence"] == [
        {
            "event_id": event.id,
            "seq": 2,
            "outcome": "SUCCEEDED",
            "result": {"paid": True, "n": 1.1},
            "recorded_at": format_time(event.created_at),
            "attempt_id": late.attempt.id,
        }
    ]
    # The attempt keeps its own copy, as before.
    (attempt,) = task["attempts"]
    assert attempt["late_evidence"]["event_id"] == event.id and "attempt_id" not in attempt["late_evidence"]


def test_a_task_without_late_evidence_has_an_empty_list(failed, call, reader):
    _, body = call(f"/v1/workflows/{failed.instance.id}/tasks/{failed.task.id}", reader)
    assert body["data"]["task"]["late_evidence"] == []


def test_the_execution_history_links_to_its_source_activation_and_instance(late, call, reader):
    _, body = call(f"/v1/workflows/{late.instance.id}/tasks/{late.task.id}", reader)
    links = body["data"]["task"]["links"]
    _, source = call(source_path(late.task.id), reader)
    assert links == source["data"]["links"]
    assert links["activation"] == f"/v1/workflows/{late.instance.id}/steps/charge/activations/{late.activation.id}"
    for name, link in links.items():
        assert call(link, reader)[0] == 200, name


def test_a_poll_query_tasks_history_links_to_its_round_list(tenancy, call, reader):
    poll = states.poll_round_failed_state(tenancy)
    _, body = call(f"/v1/workflows/{poll.instance.id}/tasks/{poll.task.id}", reader)
    rounds = body["data"]["task"]["links"]["rounds"]
    assert rounds == f"/v1/workflows/{poll.instance.id}/steps/settle/activations/{poll.activation.id}/rounds"
    assert poll.task.id in [item["task_id"] for item in call(rounds, reader)[1]["data"]["items"]]
