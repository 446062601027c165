"""Activations of a step, one activation in detail, and a POLL activation's rounds."""

import datetime as dt

from history.models import (
    Activation,
    ActivationState,
    Gate,
    PollRound,
    Queue,
    Task,
    Wait,
    WaitState,
    WorkflowInstance,
)
from tests.conftest import bearer, error_of
from tests.factories import NamespaceFactory, SignalFactory, activate, poll_round, step_of

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)


def _activations(workflow, key="charge"):
    return f"/v1/workflows/{workflow.id}/steps/{key}/activations"


def test_a_step_never_activated_lists_no_items_and_no_current_activation(workflow, reader, call):
    status, body = call(_activations(workflow), reader)
    assert status == 200
    assert body["data"] == {
        "instance_id": workflow.id,
        "revision": "1",
        "step_id": step_of(workflow, "charge").id,
        "items": [],
    }


def test_activations_run_newest_sequence_first_across_pages_without_gaps_or_repeats(workflow, reader, call):
    step = step_of(workflow, "charge")
    for _ in range(5):
        activate(step, state=ActivationState.FAILED)
    seen, cursor = [], None
    for _ in range(3):
        query = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        status, body = call(_activations(workflow), reader, **query)
        assert status == 200
        seen += [item["sequence"] for item in body["data"]["items"]]
        cursor = body["data"].get("next_cursor")
    assert seen == [5, 4, 3, 2, 1]
    assert cursor is None
    assert "next_cursor" not in body["data"]


def test_an_exactly_full_last_page_has_no_next_cursor(workflow, reader, call):
    step = step_of(workflow, "charge")
    activate(step)
    activate(step)
    status, body = call(_activations(workflow), reader, limit="2")
    assert [i["sequence"] for i in body["data"]["items"]] == [2, 1]
    assert "next_cursor" not in body["data"]


def test_the_default_page_holds_twenty_items(workflow, reader, call):
    step = step_of(workflow, "charge")
    Activation.objects.bulk_create(
        Activation(step=step, instance=workflow, sequence=n, input="{}") for n in range(1, 22)
    )
    status, body = call(_activations(workflow), reader)
    assert len(body["data"]["items"]) == 20
    assert "next_cursor" in body["data"]


def test_each_page_carries_the_instance_revision_read_for_that_page(workflow, reader, call):
    step = step_of(workflow, "charge")
    activate(step)
    activate(step)
    _, first = call(_activations(workflow), reader, limit="1")
    WorkflowInstance.objects.filter(id=workflow.id).update(revision=7)
    _, second = call(_activations(workflow), reader, limit="1", cursor=first["data"]["next_cursor"])
    assert (first["data"]["revision"], second["data"]["revision"]) == ("1", "7")


def test_list_items_carry_task_id_only_for_task_steps_and_completed_at_only_when_stored(workflow, reader, call):
    done = activate(step_of(workflow, "charge"), state=ActivationState.SUCCEEDED, completed_at=T0)
    running = activate(step_of(workflow, "charge"))
    activate(step_of(workflow, "settle"))
    _, body = call(_activations(workflow), reader)
    by_id = {item["id"]: item for item in body["data"]["items"]}
    assert by_id[done.id]["completed_at"] == "2026-09-18T08:00:00Z"
    assert by_id[done.id]["task_id"] == done.task_id
    assert "completed_at" not in by_id[running.id]
    _, body = call(_activations(workflow, "settle"), reader)
    (poll_item,) = body["data"]["items"]
    assert set(poll_item) == {"id", "step_id", "sequence", "state", "revision", "created_at", "updated_at"}


def test_times_print_six_fraction_digits_unless_the_microseconds_are_zero(workflow, reader, call):
    activate(step_of(workflow, "charge"), created_at=T0 + dt.timedelta(microseconds=500), updated_at=T0)
    _, body = call(_activations(workflow), reader)
    (item,) = body["data"]["items"]
    assert (item["created_at"], item["updated_at"]) == ("2026-09-18T08:00:00.000500Z", "2026-09-18T08:00:00Z")


def test_activation_detail_shows_the_requested_activation_beside_the_steps_current_view(workflow, reader, call):
    step = step_of(workflow, "charge")
    old = activate(step, state=ActivationState.FAILED, input='{"amount":1.10,"n":12345678901234567890123}')
    current = activate(step, state=ActivationState.NEEDS_REVIEW)
    status, detail = call(f"{_activations(workflow)}/{old.id}", reader)
    _, instance = call(f"/v1/workflows/{workflow.id}", reader)

    assert status == 200
    data = detail["data"]
    assert list(data) == ["instance_id", "revision", "step", "activation", "input"]
    assert data["step"] == next(s for s in instance["data"]["steps"] if s["key"] == "charge")
    assert data["step"]["current_activation"]["id"] == current.id
    assert data["activation"]["id"] == old.id and data["activation"]["sequence"] == 1
    _, listed = call(_activations(workflow), reader)
    assert data["activation"] == next(i for i in listed["data"]["items"] if i["id"] == old.id)


def test_activation_input_and_output_come_back_byte_exact_and_absent_differs_from_null(workflow, reader, api):
    step = step_of(workflow, "charge")
    absent = activate(step, input='{"amount":1.10}')
    null = activate(step, output="null")
    value = activate(step, output='{"n":12345678901234567890123,"x":1.50}')
    texts = {a.id: api.get(f"{_activations(workflow)}/{a.id}", **bearer(reader)).content for a in (absent, null, value)}
    assert b'"input":{"amount":1.10}' in texts[absent.id] and b'"output"' not in texts[absent.id]
    assert b'"output":null' in texts[null.id]
    assert b'"output":{"n":12345678901234567890123,"x":1.50}' in texts[value.id]


def test_a_poll_activation_shows_its_frozen_budget_and_leaves_unset_parts_out(workflow, reader, call):
    step = step_of(workflow, "settle")
    activation = activate(step, state=ActivationState.WAITING, created_at=T0)
    status, body = call(f"{_activations(workflow, 'settle')}/{activation.id}", reader)
    assert status == 200
    assert body["data"]["poll"] == {
        "first_round": 1,
        "first_round_attempts_used": 0,
        "used_rounds": 0,
        "max_rounds": 5,
        "attempts_per_round": 2,
        "interval_seconds": 60,
        "poll_deadline_at": "2026-09-19T08:00:00Z",
        "round_deadline_at": "2026-09-18T09:00:00Z",
    }
    assert "wait" not in body["data"]
    first = poll_round(activation, 1)
    Activation.objects.filter(id=activation.id).update(
        next_round_at=T0 + dt.timedelta(minutes=5), last_round_classification="PENDING"
    )
    _, body = call(f"{_activations(workflow, 'settle')}/{activation.id}", reader)
    poll = body["data"]["poll"]
    assert (poll["last_task_id"], poll["next_round_at"], poll["last_round_classification"]) == (
        first.task_id,
        "2026-09-18T08:05:00Z",
        "PENDING",
    )
    assert body["data"]["step"]["current_activation"]["task"]["id"] == first.task_id


def test_a_poll_activation_missing_its_frozen_budget_is_unavailable(workflow, reader, call):
    activation = activate(step_of(workflow, "settle"))
    Activation.objects.filter(id=activation.id).update(round_deadline_at=None)
    assert error_of(call(f"{_activations(workflow, 'settle')}/{activation.id}", reader)) == (503, "UNAVAILABLE", None)


def test_after_rearm_the_old_wait_stays_readable_with_its_deadline_and_winner(workflow, reader, call):
    step = step_of(workflow, "approve")
    deadline = T0 + dt.timedelta(hours=6)
    old = activate(step, state=ActivationState.SUPERSEDED, wait={"deadline_at": deadline})
    winner = SignalFactory(workflow=workflow)
    Wait.objects.filter(id=old.wait_id).update(state=WaitState.SUPERSEDED, winner_signal=winner)
    new = activate(step, state=ActivationState.WAITING, wait={"deadline_at": deadline, "generation": 2})

    _, body = call(f"{_activations(workflow, 'approve')}/{old.id}", reader)
    assert body["data"]["wait"] == {
        "id": old.wait_id,
        "kind": "SIGNAL",
        "generation": 1,
        "state": "SUPERSEDED",
        "deadline_at": "2026-09-18T14:00:00Z",
        "winner_signal_id": winner.id,
    }
    _, body = call(f"{_activations(workflow, 'approve')}/{new.id}", reader)
    assert body["data"]["wait"] == {
        "id": new.wait_id,
        "kind": "SIGNAL",
        "generation": 2,
        "state": "WAITING",
        "deadline_at": "2026-09-18T14:00:00Z",
    }


def test_a_timer_wait_shows_fire_at_and_a_poll_final_signal_wait_is_shown_too(workflow, reader, call):
    timer = activate(step_of(workflow, "cool-off"), wait={"fire_at": T0, "kind": "TIMER"})
    _, body = call(f"{_activations(workflow, 'cool-off')}/{timer.id}", reader)
    assert body["data"]["wait"]["fire_at"] == "2026-09-18T08:00:00Z"
    assert body["data"]["wait"]["kind"] == "TIMER"
    poll = activate(step_of(workflow, "settle"), wait={})
    _, body = call(f"{_activations(workflow, 'settle')}/{poll.id}", reader)
    assert body["data"]["wait"]["kind"] == "POLL_FINAL_SIGNAL" and "poll" in body["data"]


def test_a_wait_that_belongs_to_another_activation_is_unavailable(workflow, reader, call):
    step = step_of(workflow, "approve")
    first = activate(step)
    second = activate(step)
    Activation.objects.filter(id=second.id).update(wait_id=first.wait_id)
    assert error_of(call(f"{_activations(workflow, 'approve')}/{second.id}", reader))[0] == 503


def test_an_activation_of_another_step_is_not_found_under_this_step(workflow, reader, call):
    other = activate(step_of(workflow, "settle"))
    assert error_of(call(f"{_activations(workflow)}/{other.id}", reader)) == (404, "NOT_FOUND", None)


def test_a_current_activation_that_does_not_exist_is_unavailable(workflow, reader, call):
    step = step_of(workflow, "charge")
    kept = activate(step)
    step.current_activation_id = "f" * 32
    step.save()
    assert error_of(call(f"{_activations(workflow)}/{kept.id}", reader))[0] == 503
    assert error_of(call(f"/v1/workflows/{workflow.id}", reader))[0] == 503


def test_rounds_run_newest_round_first_and_page(workflow, reader, call):
    activation = activate(step_of(workflow, "settle"))
    for number in (1, 2, 3):
        poll_round(activation, number)
    path = f"{_activations(workflow, 'settle')}/{activation.id}/rounds"
    _, first = call(path, reader, limit="2")
    _, second = call(path, reader, limit="2", cursor=first["data"]["next_cursor"])
    assert [r["round"] for r in first["data"]["items"] + second["data"]["items"]] == [3, 2, 1]
    assert "next_cursor" not in second["data"]


def test_rounds_of_a_non_poll_activation_are_refused_after_the_not_found_checks(workflow, reader, call):
    task_activation = activate(step_of(workflow, "charge"))
    base = _activations(workflow)
    assert error_of(call(f"{base}/{task_activation.id}/rounds", reader)) == (400, "INVALID_ARGUMENT", "activation")
    assert error_of(call(f"{base}/{'e' * 32}/rounds", reader))[0] == 404
    Activation.objects.filter(id=task_activation.id).update(instance_id="e" * 32)
    assert error_of(call(f"{base}/{task_activation.id}/rounds", reader))[0] == 400


def _broken_round(workflow, breaks):
    activation = activate(step_of(workflow, "settle"))
    poll_round(activation, 1)
    second = poll_round(activation, 2)
    breaks(second, activation)
    return f"{_activations(workflow, 'settle')}/{activation.id}/rounds"


def test_a_round_whose_task_lives_in_another_namespace_is_unavailable_never_a_partial_page(workflow, reader, call):
    path = _broken_round(
        workflow, lambda r, a: Task.objects.filter(id=r.task_id).update(namespace=NamespaceFactory(name="other"))
    )
    assert error_of(call(path, reader)) == (503, "UNAVAILABLE", None)


def test_a_round_whose_task_names_another_activation_is_unavailable(workflow, reader, call):
    path = _broken_round(workflow, lambda r, a: Task.objects.filter(id=r.task_id).update(source_activation="d" * 32))
    assert error_of(call(path, reader))[0] == 503


def test_a_round_whose_task_is_on_another_queue_is_unavailable(workflow, reader, call):
    def move(poll_round, activation):
        ledger = Queue.objects.create(namespace_id=workflow.namespace_id, name="ledger")
        Task.objects.filter(id=poll_round.task_id).update(queue=ledger)

    assert error_of(call(_broken_round(workflow, move), reader))[0] == 503


def test_a_round_whose_task_is_missing_or_of_another_round_is_unavailable(workflow, reader, call):
    path = _broken_round(workflow, lambda r, a: Task.objects.filter(id=r.task_id).update(source_round=9))
    assert error_of(call(path, reader))[0] == 503
    PollRound.objects.update(task_id="d" * 32)
    assert error_of(call(path, reader))[0] == 503


def test_rounds_of_an_instance_without_its_gate_are_unavailable(workflow, reader, call):
    path = _broken_round(workflow, lambda r, a: Gate.objects.filter(instance=workflow).delete())
    assert error_of(call(path, reader))[0] == 503
