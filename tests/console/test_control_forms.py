"""The pause, resume, cancel and signal forms to the recovery forms' standard (filled in, contract shown, preview,
confirm), refusals that say who acted first, every field error at once, and the queue's status for its refresh."""

import re

import pytest
from django.test import Client

from engine.runner import runner_settle
from history.models import (
    ApprovalPolicy,
    InstanceState,
    Proposal,
    Signal,
    Step,
    StepState,
    WorkflowInstance,
    WorkflowOperation,
)
from testkit.driver import Engine
from testkit.states import (
    INPUT,
    MONEY,
    SIGNAL_STEP,
    TASK_STEP,
    result_contract_violation_state,
    task_failed_state,
    task_unknown_state,
)
from tests.console.test_recovery_forms import _decision, _form, _page, _review_post
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db

OTHER_SIGNAL = SIGNAL_STEP | {"key": "shipping", "name": "shipped", "contract": {}}


@pytest.fixture
def operator(client, console_user):
    client.force_login(console_user("olga", "operators"))
    return client


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _control(instance_id, action):
    return f"/admin/history/workflowinstance/{instance_id}/control/{action}/"


def _signal(instance_id):
    return f"/admin/history/workflowinstance/{instance_id}/signal/"


def _waiting(tenancy, steps=(SIGNAL_STEP,)) -> WorkflowInstance:
    """An instance the engine started whose signal steps wait (their waits open)."""
    engine = Engine(*tenancy)
    instance = engine.start(engine.define(list(steps), deadline_seconds=86400), INPUT)
    runner_settle()
    return instance


def _fields(html: str) -> dict:
    """The form's fields as the page fills them in (inputs and textareas)."""
    inputs = dict(re.findall(r'<input type="(?:text|hidden)" name="(\w+)" value="([^"]*)"', html))
    return inputs | dict(re.findall(r'<textarea name="(\w+)"[^>]*>\s*([^<]*)</textarea>', html))


# ---- pause / resume / cancel -------------------------------------------------------------------


def test_pause_previews_what_changes_then_confirms_with_the_reason_of_the_last_decision(operator, tenancy):
    state = task_unknown_state(tenancy)
    operator.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    instance = WorkflowInstance.objects.get(pk=state.instance.pk)
    form = operator.get(_control(instance.id, "pause")).content.decode()
    filled = _fields(form)
    assert filled["reason"] == "payment confirmed in the ledger" and 'id="prefilled"' in form
    assert filled["expected_control_revision"] == str(instance.control_revision) and 'name="_confirm"' not in form

    before = history_digest()
    posted = {"reason": filled["reason"], "expected_control_revision": filled["expected_control_revision"]}
    preview = operator.post(_control(instance.id, "pause"), posted | {"_preview": "1"}).content.decode()
    assert history_digest() == before
    assert 'id="preview"' in preview and 'name="_confirm"' in preview and "Workers claim no task" in preview
    assert re.search(r"<th>instance paused</th><td>no</td><td>yes</td>", preview)

    done = operator.post(_control(instance.id, "pause"), posted | {"_confirm": "1"}, follow=True)
    assert "Instance pause recorded." in done.content.decode()
    assert WorkflowInstance.objects.get(pk=instance.pk).paused


def test_cancel_of_a_running_instance_previews_the_stop_the_background_settles(operator, tenancy):
    instance = _waiting(tenancy)
    data = {"reason": "the order was withdrawn", "expected_control_revision": str(instance.control_revision)}
    before = history_digest()
    preview = operator.post(_control(instance.id, "cancel"), data | {"_preview": "1"}).content.decode()
    assert history_digest() == before
    assert "The instance stops" in preview
    assert re.search(r"<th>instance</th><td>RUNNING</td><td>CANCELLED</td>", preview)
    operator.post(_control(instance.id, "cancel"), data | {"_confirm": "1"})
    assert WorkflowInstance.objects.get(pk=instance.pk).state == InstanceState.CANCELLING


def test_a_stale_control_names_who_acted_first(client, operator, tenancy, console_user):
    state = task_failed_state(tenancy)
    seen = str(state.instance.control_revision)
    bob = _logged_in(console_user("bob", "operators"))
    bob.post(
        _control(state.instance.id, "pause"),
        {"reason": "bob's window", "expected_control_revision": seen} | {"_confirm": "1"},
    )
    before = history_digest()
    html = operator.post(
        _control(state.instance.id, "pause"), {"reason": "maintenance", "expected_control_revision": seen}
    ).content.decode()
    assert "Pause was already applied by bob (operators)" in html and "s ago" in html
    pause = WorkflowOperation.objects.get(workflow_id=state.instance.id, action="workflow.pause")
    assert f'data-operation-id="{pause.operation_id}"' in html and "control_revision is" in html
    assert history_digest() == before


# ---- send signal -------------------------------------------------------------------------------


def test_the_signal_form_is_filled_in_from_the_open_wait_and_shows_the_contract(operator, tenancy):
    instance = _waiting(tenancy)
    html = operator.get(_signal(instance.id)).content.decode()
    filled = _fields(html)
    assert (filled["target_step_key"], filled["name"], filled["payload_version"], filled["correlation_key"]) == (
        "approval",
        "approved",
        "1",
        INPUT["order"],
    )
    contract = html.split('id="signal-contract">')[1].split("</pre>")[0]
    assert "&quot;required&quot;: [" in contract and 'id="signal-targets"' not in html


def test_the_signal_preview_says_it_satisfies_the_open_wait_then_confirm_sends_it(operator, tenancy):
    instance = _waiting(tenancy)
    data = _fields(operator.get(_signal(instance.id)).content.decode())
    data |= {"payload": '{"by": "finance"}', "reason": "finance approved", "evidence_ref": "ticket:OPS-9"}
    before = history_digest()
    preview = operator.post(_signal(instance.id), data | {"_preview": "1"}).content.decode()
    assert history_digest() == before
    assert "The signal matches the open wait of step approval: the step succeeds" in preview
    assert re.search(r"<th>step approval</th><td>WAITING</td><td>SUCCEEDED</td>", preview)
    assert 'name="_confirm"' in preview and 'type="hidden" name="payload"' in preview

    done = operator.post(_signal(instance.id), data | {"_confirm": "1"}, follow=True).content.decode()
    assert "Signal accepted" in done
    signal = Signal.objects.get(workflow_id=instance.id)
    assert (signal.correlation_key, signal.evidence_ref) == (INPUT["order"], "ticket:OPS-9")
    runner_settle()
    assert Step.objects.get(instance_id=instance.id, key="approval").state == StepState.SUCCEEDED


def test_a_payload_that_breaks_the_contract_is_previewed_as_going_to_review(operator, tenancy):
    instance = _waiting(tenancy)
    data = _fields(operator.get(_signal(instance.id)).content.decode())
    data |= {"payload": '{"who": 1}', "reason": "finance approved"}
    preview = operator.post(_signal(instance.id), data | {"_preview": "1"}).content.decode()
    assert "breaks the step&#x27;s contract: the wait, the step and the instance go to review" in preview


def test_with_several_waits_open_the_operator_chooses_which_one_the_signal_is_for(operator, tenancy):
    instance = _waiting(tenancy, steps=(SIGNAL_STEP, OTHER_SIGNAL))
    html = operator.get(_signal(instance.id)).content.decode()
    assert 'data-target="approval"' in html and 'data-target="shipping"' in html
    assert _fields(html).get("name", "") == ""  # nothing guessed while several are open
    chosen = re.search(r'href="\?(wait=\w+)" data-target="shipping"', html).group(1)
    html = operator.get(f"{_signal(instance.id)}?{chosen}").content.decode()
    assert (_fields(html)["target_step_key"], _fields(html)["name"]) == ("shipping", "shipped")
    assert 'id="signal-contract"' not in html  # the shipping step declares no contract


def test_a_signal_no_wait_takes_is_previewed_as_buffered(operator, tenancy):
    engine = Engine(*tenancy)
    # Started, not yet advanced by the runner: the signal step has no wait yet.
    instance = engine.start(engine.define([SIGNAL_STEP], deadline_seconds=86400), INPUT)
    html = operator.get(_signal(instance.id)).content.decode()
    data = _fields(html) | {"payload": '{"by": "finance"}', "reason": "finance approved early"}
    assert data["correlation_key"] == INPUT["order"]  # as the definition correlates it
    preview = operator.post(_signal(instance.id), data | {"_preview": "1"}).content.decode()
    assert "No open wait of step approval takes it now: it is buffered for" in preview


# ---- say what happened -------------------------------------------------------------------------


def test_a_stale_second_tab_is_told_who_reviewed_the_task_and_is_not_offered_the_form_again(
    operator, tenancy, console_user
):
    state = task_unknown_state(tenancy)
    task = state.tasks[-1]
    link = f"{_form(state.instance.id, 'review-task')}?revision={state.instance.revision}&task={task.id}"
    assert 'name="_preview"' in operator.get(link).content.decode()  # the second tab, opened first
    bob = _logged_in(console_user("bob", "operators"))
    bob.post(
        _form(state.instance.id, "review-task"), _review_post(state, idempotency_key="admin-bob") | {"_confirm": "1"}
    )
    review = WorkflowOperation.objects.get(workflow_id=state.instance.id, action="workflow.review_task")

    before = history_digest()
    html = operator.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    html = html.content.decode()
    decided = html.split('id="decided">')[1].split("</div>")[0]
    assert "Review task was already applied by bob (operators)" in decided and " s ago" in decided
    assert f'data-operation-id="{review.operation_id}"' in decided and f"{_page(state.instance.id)}#timeline" in decided
    assert 'name="_confirm"' not in html and 'name="_preview"' not in html and 'id="conflict"' not in html
    assert history_digest() == before

    again = operator.get(link).content.decode()  # reopened from the stale page
    assert "so this form is not offered again" in again and 'name="_preview"' not in again


def test_an_auditor_minded_operator_gets_the_audit_row_linked(tenancy, console_user):
    state = task_unknown_state(tenancy)
    user = console_user("olga", "operators", "auditors")
    olga = _logged_in(user)
    bob = _logged_in(console_user("bob", "operators"))
    bob.post(_form(state.instance.id, "review-task"), _review_post(state, idempotency_key="k-bob") | {"_confirm": "1"})
    review = WorkflowOperation.objects.get(workflow_id=state.instance.id, action="workflow.review_task")
    html = olga.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"}).content.decode()
    assert f'href="/admin/history/workflowoperation/{review.id}/change/"' in html


def test_a_proposal_decided_in_another_tab_names_who_decided_it(tenancy, console_user):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task")
    state = task_unknown_state(tenancy)
    olga = _logged_in(console_user("olga", "operators"))
    olga.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"})
    proposal = Proposal.objects.get(workflow_id=state.instance.id)
    url = f"/admin/history/workflowinstance/{state.instance.id}/proposals/{proposal.id}/"
    anna, ben = _logged_in(console_user("anna", "approvers")), _logged_in(console_user("ben", "approvers"))
    anna.post(url, {"_approve": "1", "idempotency_key": "admin-approve-anna"})
    html = ben.post(url, {"_approve": "1", "idempotency_key": "admin-approve-ben"}).content.decode()
    assert "Review task was already applied by anna (approvers)" in html


def test_a_background_move_alone_still_reads_as_a_conflict(operator, tenancy):
    state = task_unknown_state(tenancy)
    stale = _review_post(state, expected_revision=str(state.instance.revision - 1)) | {"_confirm": "1"}
    html = operator.post(_form(state.instance.id, "review-task"), stale).content.decode()
    assert 'id="conflict"' in html and 'id="decided"' not in html and "already applied" not in html


def test_every_field_error_of_a_form_shows_at_once_before_the_service_is_called(operator, tenancy):
    state = result_contract_violation_state(tenancy, step=TASK_STEP | {"contract": MONEY}, result='{"amount":"x"}')
    step = Step.objects.get(pk=state.step.pk)
    data = _decision(
        state,
        idempotency_key="admin-resolve-all",
        step_key=step.key,
        activation_id=step.current_activation_id,
        expected_step_revision=str(step.revision),
        conclusion="SUCCEEDED",
        result='{"amount": 1.005}',
        evidence_ref="has spaces",
        reason="ok\u200bok",
    )
    before = history_digest()
    response = operator.post(_form(state.instance.id, "resolve-step"), data | {"_preview": "1"})
    errors = response.context["form"].errors
    assert set(errors) == {"reason", "evidence_ref", "result"}
    assert "breaks the step's result contract" in errors["result"][0]
    assert "without whitespace" in errors["evidence_ref"][0]
    assert 'id="preview"' not in response.content.decode()
    assert history_digest() == before


# ---- live: the queue's status ------------------------------------------------------------------


def test_the_queue_status_changes_when_an_instance_leaves_review_and_answers_only_get(operator, tenancy):
    state = task_failed_state(tenancy)
    home = operator.get("/admin/").content.decode()
    version = re.search(r'data-live="/admin/queue/status/" data-live-version="([^"]+)"', home).group(1)
    status = operator.get("/admin/queue/status/").json()
    assert status == {"version": version, "moving": True}
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    assert operator.get("/admin/queue/status/").json()["version"] != version
    assert operator.post("/admin/queue/status/").status_code == 405


def test_the_instance_page_follows_a_running_instance_and_stops_once_finished(operator, tenancy):
    instance = _waiting(tenancy)
    page = operator.get(_page(instance.id)).content.decode()
    assert 'aria-live="polite"' in page and 'id="follow"' in page and "data-live=" in page
    WorkflowInstance.objects.filter(pk=instance.pk).update(state=InstanceState.CANCELLED)
    page = operator.get(_page(instance.id)).content.decode()
    assert 'id="follow"' not in page and "data-live=" not in page
    assert operator.get(f"/admin/history/workflowinstance/{instance.id}/status/").json()["moving"] is False
