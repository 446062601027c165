"""The decision form: one form, a preview of the whole chain, one confirm; the decision's page and its four eyes."""

import re
from html import unescape

import pytest
from django.test import Client

from engine.runner import runner_settle
from history.models import ApprovalPolicy, Decision, InstanceState, WorkflowInstance, WorkflowOperation
from testkit.states import task_failed_state, task_unknown_state
from tests.console.test_recovery_forms import _form, _page, _review_post
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

PAID = '{"paid":true,"amount":1.10}'


def _decide(instance_id):
    return f"/admin/history/workflowinstance/{instance_id}/decide/"


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _fields(state, **fields):
    """What the operator posts: the hidden fields the form came with, and what they chose and typed."""
    return {
        "kind": "conclude",
        "step_key": state.instance.review_step_key,
        "expected_revision": str(state.instance.revision),
        "idempotency_key": "admin-decide-1",
        "conclusion": "SUCCEEDED",
        "result": PAID,
        "reason": "the charge went through: ledger entry 42",
        "evidence_ref": "ticket:OPS-42",
        "declaration": "on",
        **fields,
    }


@pytest.fixture
def olga(console_user):
    return _logged_in(console_user("olga", "operators"))


def test_the_form_opens_on_the_kind_the_cause_calls_for_with_the_facts_and_the_contract(tenancy, olga):
    state = task_unknown_state(tenancy)
    page = olga.get(_decide(state.instance.id)).content.decode()
    assert re.search(r'value="conclude" id="id_kind_conclude" data-outcome="conclusion result" checked', page)
    # Retrying is not possible while a task's outcome is unknown: offered disabled, with the rule's words.
    assert re.search(r'id="id_kind_retry"[^>]* disabled', page) and "Not possible now: Retry step:" in page
    assert 'id="decision-facts"' in page and 'id="step-contract"' in page
    failed = task_failed_state(tenancy, attempts_used=1)
    assert re.search(r'id="id_kind_retry"[^>]* checked', olga.get(_decide(failed.instance.id)).content.decode())


def test_every_field_error_shows_at_once_and_nothing_is_written(tenancy, olga):
    state = task_unknown_state(tenancy)
    before = history_digest()
    bad = _fields(state, result="", reason="", declaration="", _preview="1")
    page = unescape(olga.post(_decide(state.instance.id), bad).content.decode())
    assert "The work ended this way needs the result." in page
    assert page.count('class="errorlist') >= 3  # the result, the reason, the declaration
    broken = _fields(state, result='{"paid": "yes"}', _preview="1")
    assert "id_result" in olga.post(_decide(state.instance.id), broken).content.decode()
    assert history_digest() == before and not Decision.objects.exists()


def test_preview_shows_the_whole_chain_then_one_confirm_runs_it_to_the_end(tenancy, olga):
    state = task_unknown_state(tenancy)
    before = history_digest()
    preview = olga.post(_decide(state.instance.id), _fields(state, _preview="1")).content.decode()
    assert history_digest() == before
    steps = re.findall(r'<li data-chain-step="\d+"><h3>([^<]+)', preview)
    assert [s.strip() for s in steps] == ["Review task", "Resolve step", "Continue instance"]
    assert 'name="_confirm"' in preview and "once the background has taken in the step before" in preview
    answer = olga.post(_decide(state.instance.id), _fields(state, _confirm="1"), follow=True)
    assert answer.redirect_chain[-1][0].endswith("#decisions")
    page = unescape(answer.content.decode())
    assert "“The work ended this way” decided: ran Review task" in page and 'data-decision-state="RUNNING"' in page
    runner_settle()
    decision = Decision.objects.get()
    assert decision.state == "SUCCEEDED"
    assert [s["operation"] for s in decision.steps] == ["review-task", "resolve-step", "continue"]
    assert WorkflowInstance.objects.get(pk=state.instance.id).state == InstanceState.SUCCEEDED
    # The same form again (a double click, a second tab on the same form): the same decision, nothing twice.
    audits = WorkflowOperation.objects.count()
    again = unescape(olga.post(_decide(state.instance.id), _fields(state, _confirm="1"), follow=True).content.decode())
    assert "already decided with this form" in again and WorkflowOperation.objects.count() == audits


def test_a_stale_form_says_who_decided_what_and_when_and_is_not_offered_again(tenancy, olga, console_user):
    state = task_unknown_state(tenancy)
    seen = _decide(state.instance.id) + f"?revision={state.instance.revision}"
    # A colleague reviews the task with the one-operation form first.
    piotr = _logged_in(console_user("piotr", "operators"))
    piotr.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    page = unescape(olga.post(_decide(state.instance.id), _fields(state, _preview="1")).content.decode())
    assert re.search(r"Review task was already applied by piotr \(operators\) \d+ s ago", page)
    assert not Decision.objects.exists()
    # Once the review is over, the link from the old page no longer offers the form.
    runner_settle()
    resolve = olga.post(
        _decide(state.instance.id), _fields(state, expected_revision=str(_revision(state)), _confirm="1")
    )
    assert resolve.status_code == 302
    runner_settle()
    assert "so this form is not offered again" in unescape(olga.get(seen).content.decode())


def _revision(state) -> int:
    return WorkflowInstance.objects.get(pk=state.instance.id).revision


def test_under_four_eyes_the_whole_decision_is_proposed_and_a_second_login_approves_it(tenancy, olga, console_user):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="resolve-step")
    state = task_unknown_state(tenancy)
    made = unescape(olga.post(_decide(state.instance.id), _fields(state, _confirm="1"), follow=True).content.decode())
    assert "needs a second person's approval here" in made
    decision = Decision.objects.get()
    assert decision.state == "PROPOSED" and decision.steps == []
    url = f"/admin/history/workflowinstance/{state.instance.id}/decisions/{decision.id}/"
    own = olga.get(url).content.decode()
    assert 'id="own-decision"' in own and 'id="approve"' not in own
    anna = _logged_in(console_user("anna", "operators"))
    # The home page: anna sees it waiting for her; olga sees it among her decisions, proposed.
    assert f'data-waiting-decision="{decision.id}"' in anna.get("/admin/").content.decode()
    assert f'data-my-decision="{decision.id}" data-decision-state="PROPOSED"' in olga.get("/admin/").content.decode()
    page = anna.get(url).content.decode()
    assert 'id="decision-facts"' in page
    steps = re.findall(r'<li data-chain-step="\d+">([^:]+):', page)
    assert steps == ["Review task", "Resolve step", "Continue instance"]
    approved = anna.post(url, {"idempotency_key": "admin-approve-1", "_approve": "1"}, follow=True)
    assert "approved: ran Review task" in unescape(approved.content.decode())
    runner_settle()
    decision.refresh_from_db()
    assert (decision.state, decision.approval["outcome"]) == ("SUCCEEDED", "APPROVED")
    mine = unescape(olga.get("/admin/").content.decode())
    assert re.search(r'data-my-decision="\w+" data-decision-state="SUCCEEDED".*approved by anna', mine, re.S)
    # Each step ran unheld, audited with the approval that covered the whole chain.
    steps = WorkflowOperation.objects.filter(operation_id__in=[s["operation_id"] for s in decision.steps])
    assert {(a.after["decision"]["id"], a.after["decision"]["approved_by"]) for a in steps} == {
        (decision.id, decision.approval["by"])
    }


def test_the_queue_and_the_instance_page_lead_to_the_form_and_viewers_get_none(tenancy, olga, console_user):
    state = task_unknown_state(tenancy)
    assert f'href="{_decide(state.instance.id)}?revision=' in olga.get("/admin/").content.decode()
    assert "data-decide" in olga.get(_page(state.instance.id)).content.decode()
    viewer = _logged_in(console_user("vic", "viewers"))
    assert "data-decide" not in viewer.get(_page(state.instance.id)).content.decode()
    assert viewer.get(_decide(state.instance.id)).status_code == 403


def test_its_maker_withdraws_a_proposed_decision_with_a_reason_and_nothing_runs(tenancy, olga):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="continue")
    state = task_unknown_state(tenancy)
    olga.post(_decide(state.instance.id), _fields(state, _confirm="1"))
    decision = Decision.objects.get()
    url = f"/admin/history/workflowinstance/{state.instance.id}/decisions/{decision.id}/"
    before = history_digest()
    unexplained = olga.post(url, {"idempotency_key": "admin-withdraw-1", "_reject": "1"}).content.decode()
    assert 'id="id_reason_error"><li>reason must be' in unexplained and history_digest() == before
    withdrawn = olga.post(url, {"idempotency_key": "admin-withdraw-2", "_reject": "1", "reason": "wrong ticket"})
    assert withdrawn.status_code == 302
    decision.refresh_from_db()
    assert (decision.state, decision.steps, decision.approval["note"]) == ("REJECTED", [], "wrong ticket")
    assert WorkflowInstance.objects.get(pk=state.instance.id).revision == state.instance.revision
    # Answered: the page no longer offers the form, and says who answered.
    page = unescape(olga.get(url).content.decode())
    assert 'id="answer-form"' not in page and "Rejected by olga (operators)" in page
