"""Three complete answers, values and key order, reproduced from real rows: a recovered step's activations,
a POLL round under two activations, and a signal operation's detail."""

import datetime as dt
import json

from history.models import ActivationState, Signal, SignalState
from tests.conftest import STEPS
from tests.factories import WorkflowInstanceFactory, accept_signal, activate, poll_round, step_of

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
ID = {c: c * 32 for c in "123456789abc"}


def _example_instance(namespace, *, revision):
    return WorkflowInstanceFactory(
        id=ID["1"],
        namespace=namespace,
        revision=revision,
        definition__spec={"steps": STEPS},
        rows__ids={"charge": ID["2"]},
    )


def _same_text(data, expected):
    """Equal values in the same key order."""
    assert json.dumps(data) == json.dumps(expected)


def test_page_two_of_a_recovered_step_lists_generation_one_while_the_current_is_generation_two(namespace, reader, call):
    instance = _example_instance(namespace, revision=12)
    step = step_of(instance, "charge")
    activate(
        step,
        id=ID["3"],
        state=ActivationState.FAILED,
        revision=3,
        created_at=T0,
        updated_at=T0 + S,
        completed_at=T0 + S,
        task={"id": ID["5"]},
    )
    activate(step, id=ID["4"], state=ActivationState.ACTIVE, created_at=T0 + 2 * S)
    path = f"/v1/workflows/{ID['1']}/steps/charge/activations"

    status, first = call(path, reader, limit="1")
    assert status == 200
    assert [item["id"] for item in first["data"]["items"]] == [ID["4"]]
    status, second = call(path, reader, limit="1", cursor=first["data"]["next_cursor"])

    assert status == 200
    _same_text(
        second["data"],
        {
            "instance_id": ID["1"],
            "revision": "12",
            "step_id": ID["2"],
            "current_activation_id": ID["4"],
            "items": [
                {
                    "id": ID["3"],
                    "step_id": ID["2"],
                    "sequence": 1,
                    "state": "FAILED",
                    "revision": "3",
                    "task_id": ID["5"],
                    "created_at": "2026-09-18T08:00:00Z",
                    "updated_at": "2026-09-18T08:00:01Z",
                    "completed_at": "2026-09-18T08:00:01Z",
                }
            ],
        },
    )


def test_poll_round_one_exists_under_two_activations_and_each_lists_its_own(namespace, reader, call):
    instance = _example_instance(namespace, revision=20)
    step = step_of(instance, "settle")
    first = activate(step, state=ActivationState.FAILED, created_at=T0)
    earlier = poll_round(first, 1, created_at=T0 + S)
    second = activate(step, id=ID["4"], state=ActivationState.ACTIVE, created_at=T0 + 2 * S)
    poll_round(second, 1, id=ID["7"], round_id=ID["6"], created_at=T0 + 2 * S)
    base = f"/v1/workflows/{ID['1']}/steps/settle/activations"

    status, body = call(f"{base}/{ID['4']}/rounds", reader)

    assert status == 200
    _same_text(
        body["data"],
        {
            "instance_id": ID["1"],
            "revision": "20",
            "activation_id": ID["4"],
            "items": [
                {
                    "id": ID["6"],
                    "activation_id": ID["4"],
                    "round": 1,
                    "task_id": ID["7"],
                    "created_at": "2026-09-18T08:00:02Z",
                }
            ],
        },
    )
    status, body = call(f"{base}/{first.id}/rounds", reader)
    assert [(i["id"], i["round"], i["task_id"]) for i in body["data"]["items"]] == [(earlier.id, 1, earlier.task_id)]


def test_signal_operation_detail_keeps_before_null_and_the_acceptance_snapshot(namespace, auditor, call):
    instance = _example_instance(namespace, revision=5)
    signal, _ = accept_signal(
        instance,
        id=ID["9"],
        accepted_at=T0 + 2 * S,
        operation={
            "id": ID["8"],
            "operation_id": ID["b"],
            "actor_id": ID["c"],
            "reason": "verified external completion",
            "evidence_ref": "proof:event-1",
            "after": {"signal_id": ID["9"], "state": "PENDING"},
        },
    )
    # Consumed later: the acceptance audit is not rewritten.
    Signal.objects.filter(id=signal.id).update(state=SignalState.CONSUMED, revision=2)

    status, body = call(f"/v1/workflows/{ID['1']}/signals/{ID['9']}/operations/{ID['8']}", auditor)

    assert status == 200
    _same_text(
        body["data"],
        {
            "id": ID["8"],
            "workflow_id": ID["1"],
            "signal_id": ID["9"],
            "operation_id": ID["b"],
            "actor_id": ID["c"],
            "action": "workflow.signal",
            "created_at": "2026-09-18T08:00:02Z",
            "reason": "verified external completion",
            "evidence_ref": "proof:event-1",
            "before": None,
            "after": {"signal_id": ID["9"], "state": "PENDING"},
        },
    )
    status, by_operation_id = call(f"/v1/workflows/{ID['1']}/signals/{ID['9']}/operations/{ID['b']}", auditor)
    assert status == 404
