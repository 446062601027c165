"""A workflow's signals, one signal, and the signal resource audit."""

import datetime as dt

from history.models import Disposition, Signal, SignalOperation, SignalState, Wait
from tests.conftest import bearer, error_of
from tests.factories import (
    NamespaceFactory,
    SignalFactory,
    SignalOperationFactory,
    WorkflowInstanceFactory,
    accept_signal,
    activate,
    step_of,
)

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)
ITEM_KEYS = [
    "id",
    "workflow_id",
    "revision",
    "name",
    "payload_version",
    "target_step_key",
    "target_activation_sequence",
    "state",
    "accepted_at",
    "expires_at",
]


def _signals(workflow):
    return f"/v1/workflows/{workflow.id}/signals"


def test_a_workflow_without_signals_lists_no_items(workflow, reader, call):
    status, body = call(_signals(workflow), reader)
    assert (status, body["data"]) == (200, {"workflow_id": workflow.id, "revision": "1", "items": []})


def test_signals_run_by_accepted_at_then_id_descending_across_pages(workflow, reader, call):
    same = [SignalFactory(workflow=workflow, id=c * 32, accepted_at=T0) for c in "abc"]
    newest = SignalFactory(workflow=workflow, accepted_at=T0 + dt.timedelta(seconds=1))
    _, first = call(_signals(workflow), reader, limit="2")
    _, second = call(_signals(workflow), reader, limit="2", cursor=first["data"]["next_cursor"])
    ids = [s["id"] for s in first["data"]["items"] + second["data"]["items"]]
    assert ids == [newest.id, same[2].id, same[1].id, same[0].id]
    assert "next_cursor" not in second["data"]


def test_a_signal_item_never_carries_payload_correlation_actor_or_evidence(workflow, reader, call):
    SignalFactory(workflow=workflow, evidence_ref="proof:1", accepted_at=T0)
    SignalFactory(
        workflow=workflow,
        state=SignalState.CONSUMED,
        disposition=Disposition.APPLIED,
        accepted_at=T0 + dt.timedelta(seconds=1),
    )
    _, body = call(_signals(workflow), reader)
    consumed, pending = body["data"]["items"]
    assert list(pending) == ITEM_KEYS
    assert list(consumed) == [*ITEM_KEYS, "disposition"] and consumed["disposition"] == "APPLIED"


def test_legacy_signal_rows_come_back_as_they_are(workflow, reader, call):
    SignalFactory(workflow=workflow, payload_version="", target_activation_sequence=0)
    _, body = call(_signals(workflow), reader)
    (item,) = body["data"]["items"]
    assert (item["payload_version"], item["target_activation_sequence"]) == ("", 0)


def test_signals_of_another_workflow_or_namespace_are_not_listed(workflow, reader, call):
    SignalFactory(workflow=WorkflowInstanceFactory(namespace=workflow.namespace))
    SignalFactory(workflow=workflow, namespace=NamespaceFactory(name="elsewhere"))
    _, body = call(_signals(workflow), reader)
    assert body["data"]["items"] == []


def test_the_signal_detail_carries_the_full_signal_with_its_payload_byte_exact(workflow, reader, api):
    step = step_of(workflow, "approve")
    activation = activate(step)
    signal = SignalFactory(
        workflow=workflow,
        payload='{"amount":1.10,"n":12345678901234567890123}',
        state=SignalState.CONSUMED,
        disposition=Disposition.APPLIED,
        consumed_wait_id=activation.wait_id,
        evidence_ref="proof:event-1",
        accepted_at=T0,
    )
    Wait.objects.filter(id=activation.wait_id).update(winner_signal=signal)
    response = api.get(f"{_signals(workflow)}/{signal.id}", **bearer(reader))
    assert response.status_code == 200
    assert b'"payload":{"amount":1.10,"n":12345678901234567890123}' in response.content
    data = response.json()["data"]
    assert list(data) == [
        *ITEM_KEYS,
        "disposition",
        "payload",
        "correlation_key",
        "actor_id",
        "evidence_ref",
        "consumed_wait_id",
    ]
    assert (data["correlation_key"], data["actor_id"], data["consumed_wait_id"]) == (
        "o-1",
        "c" * 32,
        activation.wait_id,
    )
    wait = api.get(f"/v1/workflows/{workflow.id}/steps/approve/activations/{activation.id}", **bearer(reader)).json()
    assert wait["data"]["wait"]["winner_signal_id"] == signal.id


def test_a_pending_signal_detail_leaves_evidence_and_consumed_wait_out(workflow, reader, call):
    signal = SignalFactory(workflow=workflow)
    _, body = call(f"{_signals(workflow)}/{signal.id}", reader)
    assert "evidence_ref" not in body["data"] and "consumed_wait_id" not in body["data"]
    assert "disposition" not in body["data"]


def test_a_signal_of_another_workflow_is_not_found_here(workflow, reader, call):
    other = SignalFactory(workflow=WorkflowInstanceFactory(namespace=workflow.namespace))
    assert error_of(call(f"{_signals(workflow)}/{other.id}", reader)) == (404, "NOT_FOUND", None)


def test_a_signal_whose_namespace_disagrees_with_its_workflow_is_unavailable(workflow, reader, auditor, call):
    signal, record = accept_signal(workflow)
    Signal.objects.filter(id=signal.id).update(namespace=NamespaceFactory(name="elsewhere"))
    assert error_of(call(f"{_signals(workflow)}/{signal.id}", reader))[0] == 503
    assert error_of(call(f"{_signals(workflow)}/{signal.id}/operations", auditor))[0] == 503
    assert error_of(call(f"{_signals(workflow)}/{signal.id}/operations/{record.id}", auditor))[0] == 503


def test_a_signal_consumed_by_a_wait_of_another_workflow_is_unavailable(workflow, reader, call):
    other = WorkflowInstanceFactory(namespace=workflow.namespace, definition=workflow.definition)
    foreign = activate(step_of(other, "approve"))
    signal = SignalFactory(workflow=workflow, state=SignalState.CONSUMED, consumed_wait_id=foreign.wait_id)
    assert error_of(call(f"{_signals(workflow)}/{signal.id}", reader))[0] == 503


def test_signal_operations_list_the_signals_audit_newest_first(workflow, auditor, call):
    signal, accepted = accept_signal(workflow, accepted_at=T0)
    later = SignalOperationFactory(signal=signal, created_at=T0 + dt.timedelta(seconds=1))
    accept_signal(workflow)
    path = f"{_signals(workflow)}/{signal.id}/operations"
    _, first = call(path, auditor, limit="1")
    _, second = call(path, auditor, limit="1", cursor=first["data"]["next_cursor"])
    assert list(first["data"]) == ["items", "next_cursor"]
    assert [r["id"] for r in first["data"]["items"] + second["data"]["items"]] == [later.id, accepted.id]
    assert list(second["data"]) == ["items"]
    assert list(second["data"]["items"][0]) == [
        "id",
        "workflow_id",
        "signal_id",
        "operation_id",
        "actor_id",
        "action",
        "created_at",
    ]


def test_a_signal_without_audit_lists_no_items(workflow, auditor, call):
    signal = SignalFactory(workflow=workflow)
    assert call(f"{_signals(workflow)}/{signal.id}/operations", auditor)[1]["data"] == {"items": []}


def test_the_signal_operation_detail_leaves_an_absent_evidence_out_but_keeps_before_null(workflow, auditor, call):
    signal, record = accept_signal(workflow)
    _, body = call(f"{_signals(workflow)}/{signal.id}/operations/{record.id}", auditor)
    assert "evidence_ref" not in body["data"]
    assert body["data"]["before"] is None
    assert body["data"]["after"]["state"] == "PENDING" and body["data"]["after"]["signal_id"] == signal.id


def test_a_signal_operation_under_another_signal_is_not_found(workflow, auditor, call):
    signal, _ = accept_signal(workflow)
    _, other = accept_signal(workflow)
    assert error_of(call(f"{_signals(workflow)}/{signal.id}/operations/{other.id}", auditor))[0] == 404


def test_a_signal_operation_whose_workflow_disagrees_with_its_signal_is_unavailable(workflow, auditor, call):
    signal, record = accept_signal(workflow)
    SignalOperation.objects.filter(id=record.id).update(workflow_id="e" * 32)
    assert error_of(call(f"{_signals(workflow)}/{signal.id}/operations/{record.id}", auditor))[0] == 503


def test_a_missing_child_is_not_found_even_under_a_corrupted_signal(workflow, auditor, call):
    signal, _ = accept_signal(workflow)
    Signal.objects.filter(id=signal.id).update(namespace=NamespaceFactory(name="elsewhere"))
    assert error_of(call(f"{_signals(workflow)}/{signal.id}/operations/{'e' * 32}", auditor))[0] == 404
