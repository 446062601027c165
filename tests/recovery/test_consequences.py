"""The consequence preview: the operation and the background's own code run, then rolled back."""

import pytest

from core.errors import FailedPrecondition
from recovery.consequences import operation_consequences
from recovery.eligibility import operation_preview
from testkit import requests as rq
from testkit.states import poll_round_unknown_state, task_failed_state, task_unknown_state
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


def _rows(identity, state, operation, command) -> dict:
    before = history_digest()
    rows = operation_consequences(
        identity=identity, operation=operation, instance_id=state.instance.id, command=command
    )
    assert history_digest() == before  # nothing written, nothing left locked or half-done
    return {what: (now, after) for what, now, after in rows}


@pytest.mark.parametrize(("status", "classified"), [("DONE", "SUCCEEDED"), ("WAITING", "PENDING")])
def test_review_task_on_a_poll_shows_how_the_mapping_will_classify_the_answer(recoverer, tenancy, status, classified):
    state = poll_round_unknown_state(tenancy)
    command = rq.review(state, result={"status": status})
    rows = _rows(recoverer, state, "review-task", command)
    activation = next(what for what in rows if what.endswith("last round"))
    assert rows[activation] == ("—", classified)


def test_retry_step_shows_the_new_activation_and_its_queued_task(recoverer, tenancy):
    state = task_failed_state(tenancy)
    rows = _rows(recoverer, state, "retry-step", rq.retry(state))
    assert rows["step charge activation #2"] == ("—", "ACTIVE")
    assert rows["tasks queued or running"] == ("0", "1")


def test_a_refusal_is_the_commits_refusal(recoverer, tenancy):
    state = task_unknown_state(tenancy)
    command = rq.continue_(state)
    with pytest.raises(FailedPrecondition) as preview:
        operation_preview(identity=recoverer, operation="continue", instance_id=state.instance.id, command=command)
    before = history_digest()
    with pytest.raises(FailedPrecondition) as consequence:
        operation_consequences(identity=recoverer, operation="continue", instance_id=state.instance.id, command=command)
    assert consequence.value.message == preview.value.message and history_digest() == before
