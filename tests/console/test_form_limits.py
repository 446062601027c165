"""Admin forms parse JSON by the API's limits: deep, long-numbered or oversized JSON is a form error, not a 500."""

import json

import pytest

from testkit.states import task_unknown_state
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, console_user):
    client.force_login(console_user("olga", "operators"))
    return client


BAD_FORM_JSON = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "long number": "9" * 5000,
    "oversized": json.dumps("x" * (256 * 1024)),
}


@pytest.mark.parametrize("kind", sorted(BAD_FORM_JSON))
def test_the_review_form_answers_bad_json_as_a_form_error_on_result(operator, tenancy, kind):
    state = task_unknown_state(tenancy)
    task = state.tasks[-1]
    data = {
        "expected_revision": str(state.instance.revision),
        "reason": "payment confirmed in the ledger",
        "evidence_ref": "ticket:OPS-123",
        "declaration": "on",
        "idempotency_key": "admin-form-key-1",
        "task_id": task.id,
        "expected_task_revision": str(task.revision),
        "conclusion": "SUCCEEDED",
        "result": BAD_FORM_JSON[kind],
    }
    before = history_digest()
    for step in ("_preview", "_confirm"):
        response = operator.post(
            f"/admin/history/workflowinstance/{state.instance.id}/recovery/review-task/", data | {step: "1"}
        )
        assert response.status_code == 200
        assert "not valid JSON" in response.content.decode()
    assert history_digest() == before


@pytest.mark.parametrize("kind", sorted(BAD_FORM_JSON))
def test_the_signal_form_answers_bad_json_as_a_form_error_on_payload(operator, tenancy, kind):
    state = task_unknown_state(tenancy)
    data = {
        "target_step_key": "charge",
        "name": "approved",
        "payload_version": "v1",
        "correlation_key": "o-1",
        "payload": BAD_FORM_JSON[kind],
        "reason": "finance approved",
        "idempotency_key": "admin-signal-1",
    }
    before = history_digest()
    response = operator.post(f"/admin/history/workflowinstance/{state.instance.id}/signal/", data)
    assert response.status_code == 200 and "not valid JSON" in response.content.decode()
    assert history_digest() == before
