"""The instance page puts the facts of the decision beside it: the step's definition, its tasks' input and
attempts with the retryable flag, the budget in words, POLL answers as the mapping classifies them."""

import re

import pytest

from testkit.states import poll_answered_state, task_failed_state, task_unknown_state

pytestmark = pytest.mark.django_db


def _facts(client, instance_id) -> str:
    html = client.get(f"/admin/history/workflowinstance/{instance_id}/change/").content.decode()
    return html.split('id="decision-facts"')[1].split("</section>")[0]


@pytest.fixture
def viewer(client, console_user):
    client.force_login(console_user("vic", "viewers"))
    return client


def test_a_failed_task_shows_its_input_attempts_retryable_flags_and_why_no_attempt_followed(viewer, tenancy):
    state = task_failed_state(tenancy)  # attempt 1 failed retryable, attempt 2 not retryable
    facts = _facts(viewer, state.instance.id)
    assert "&quot;handler&quot;: &quot;charge_card&quot;" in facts  # the step's definition
    assert re.findall(r'<tr data-attempt="(\d)">.*?<td>(yes|no)</td>', facts, re.S) == [("1", "yes"), ("2", "no")]
    assert "attempt 2 failed and its worker said it is not retryable, so no attempt followed; 2 of" in facts
    assert "declined" in facts and f'href="/admin/history/task/{state.task.id}/change/"' in facts
    assert state.task.input in facts.replace("&quot;", '"')


def test_an_unknown_outcome_says_the_task_never_retries_by_itself(viewer, tenancy):
    facts = _facts(viewer, task_unknown_state(tenancy).instance.id)
    assert "lease expired: its outcome is unknown, so the task never retries by itself" in facts


@pytest.mark.parametrize(
    ("answer", "classified"), [({"status": "REJECTED"}, "FAILED"), ({"status": "LOST"}, "unmapped (matches no value)")]
)
def test_a_poll_answer_shows_how_the_mapping_classified_it(viewer, tenancy, answer, classified):
    facts = _facts(viewer, poll_answered_state(tenancy, answer=answer).instance.id)
    assert f"the mapping classifies it <strong data-classification>{classified}</strong>" in facts


def test_no_facts_outside_a_step_review(viewer, tenancy):
    state = task_failed_state(tenancy, paused=True)
    html = viewer.get(f"/admin/history/workflowinstance/{state.instance.id}/change/").content.decode()
    assert 'id="decision-facts"' in html  # in review
    state.instance.__class__.objects.filter(pk=state.instance.id).update(review_step_key="")
    html = viewer.get(f"/admin/history/workflowinstance/{state.instance.id}/change/").content.decode()
    assert 'id="decision-facts"' not in html
