"""The operator console's recovery forms: permission, preview, commit, conflict, double submit, bulk."""

import re

import pytest

from console import actions as console_admin
from history.credentials import identity_of_credential
from history.models import InstanceState, Scope, Task, TaskState, WorkflowInstance, WorkflowOperation
from recovery.operations import step_retry
from testkit import requests as rq
from testkit.states import cancel_unknown_state, task_failed_state, task_unknown_state
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


def _page(instance_id):
    return f"/admin/history/workflowinstance/{instance_id}/change/"


def _form(instance_id, operation):
    return f"/admin/history/workflowinstance/{instance_id}/recovery/{operation}/"


def _decision(state, **fields):
    """The fields every recovery form posts, as the operator filled them in."""
    return {
        "expected_revision": str(state.instance.revision),
        "reason": "payment confirmed in the ledger",
        "evidence_ref": "ticket:OPS-123",
        "declaration": "on",
        **fields,
    }


def _review_post(state, **overrides):
    task = state.tasks[-1]
    return (
        _decision(
            state,
            idempotency_key="admin-form-key-1",
            task_id=task.id,
            expected_task_revision=str(task.revision),
            conclusion="SUCCEEDED",
            result='{"paid":true,"amount":1.10}',
        )
        | overrides
    )


@pytest.fixture
def operator(client, console_user):
    client.force_login(console_user("olga", "operators"))
    return client


@pytest.mark.parametrize("group", ["viewers", "auditors"])
def test_recovery_forms_are_refused_server_side_without_the_recover_permission(client, tenancy, console_user, group):
    state = task_unknown_state(tenancy)
    client.force_login(console_user("vic", group))
    before = history_digest()
    assert client.get(_form(state.instance.id, "review-task")).status_code == 403
    assert (
        client.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"}).status_code == 403
    )
    assert history_digest() == before
    page = client.get(_page(state.instance.id)).content.decode()
    assert "data-operation=" not in page


def test_the_instance_page_offers_only_eligible_operations_and_says_why_not(operator, tenancy):
    state = task_unknown_state(tenancy)
    html = operator.get(_page(state.instance.id)).content.decode()
    assert 'data-operation="review-task"' in html
    assert 'data-operation="retry-step"' not in html
    assert 'data-refused="retry-step"' in html
    assert 'data-refused="continue"' in html


def test_the_form_spells_out_the_declaration_and_carries_the_revisions_seen(operator, tenancy):
    state = task_unknown_state(tenancy)
    task = state.tasks[-1]
    url = f"{_form(state.instance.id, 'review-task')}?revision=5&task={task.id}&task_revision={task.revision}"
    html = operator.get(url).content.decode()
    assert "A lease expiry or an UNKNOWN result does not prove this." in html
    assert 'name="expected_revision" value="5"' in html
    assert f'name="task_id" value="{task.id}"' in html
    assert 'name="idempotency_key" value="admin-' in html


def test_the_preview_shows_the_change_and_writes_nothing(operator, tenancy):
    state = task_unknown_state(tenancy)
    before = history_digest()
    response = operator.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_preview": "1"})
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="preview"' in html and 'name="_confirm"' in html
    assert '<tr class="changed"><th>instance.revision</th>' in html
    # Then the background consumes the REVIEWED event: the activation's verified outcome is shown.
    consequences = html.split('id="consequences"')[1].split("</table>")[0]
    assert re.search(r"<th>step charge activation #1 verified outcome</th><td>—</td><td>SUCCEEDED</td>", consequences)
    assert history_digest() == before


def test_confirm_applies_the_operation_once_even_when_submitted_twice(operator, tenancy):
    state = task_unknown_state(tenancy)
    data = _review_post(state) | {"_confirm": "1"}
    first = operator.post(_form(state.instance.id, "review-task"), data, follow=True)
    assert "Review task applied" in first.content.decode()
    second = operator.post(_form(state.instance.id, "review-task"), data, follow=True)
    assert "already applied" in second.content.decode()
    assert WorkflowOperation.objects.filter(workflow=state.instance, action="workflow.review_task").count() == 1
    assert Task.objects.get(id=state.tasks[-1].id).state == TaskState.SUCCEEDED


def test_a_background_change_since_the_page_was_read_is_a_conflict_and_writes_nothing(operator, tenancy):
    state = task_unknown_state(tenancy)
    before = history_digest()
    stale = _review_post(state, expected_revision=str(state.instance.revision - 1)) | {"_confirm": "1"}
    html = operator.post(_form(state.instance.id, "review-task"), stale).content.decode()
    assert 'id="conflict"' in html and "Reload the instance page" in html
    assert history_digest() == before


def test_a_refused_operation_shows_the_service_reason(operator, tenancy):
    state = task_unknown_state(tenancy)
    before = history_digest()
    data = _decision(state, idempotency_key="admin-continue-1", _confirm="1")
    html = operator.post(_form(state.instance.id, "continue"), data).content.decode()
    assert 'id="refusal"' in html and "FAILED_PRECONDITION" in html
    assert history_digest() == before


def test_a_missing_declaration_is_a_form_error_and_writes_nothing(operator, tenancy):
    state = task_unknown_state(tenancy)
    before = history_digest()
    data = _review_post(state) | {"_confirm": "1"}
    del data["declaration"]
    response = operator.post(_form(state.instance.id, "review-task"), data)
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert history_digest() == before


def test_an_invalid_evidence_reference_is_shown_on_its_field(operator, tenancy):
    state = task_unknown_state(tenancy)
    html = operator.post(
        _form(state.instance.id, "review-task"), _review_post(state, evidence_ref="has spaces") | {"_preview": "1"}
    ).content.decode()
    assert "evidence_ref must be 1 to 512 characters without whitespace" in html
    assert 'id="preview"' not in html


def test_bulk_continue_reports_a_result_per_instance(operator, tenancy, issue_token):
    recoverer = identity_of_credential(issue_token(scopes=[Scope.RECOVER]).credential)
    refused = task_unknown_state(tenancy)
    other = task_failed_state(tenancy)
    # Retried, the failed instance is ready to continue; the UNKNOWN one is not.
    step_retry(identity=recoverer, instance_id=other.instance.id, idempotency_key="k1", command=rq.retry(other))
    other.instance.refresh_from_db()
    ids = [refused.instance.id, other.instance.id]
    url = "/admin/history/workflowinstance/"
    intermediate = operator.post(url, {"action": "continue_selected", "_selected_action": ids})
    assert intermediate.status_code == 200
    html = intermediate.content.decode()
    assert f'name="revision_{refused.instance.id}" value="{refused.instance.revision}"' in html
    data = {
        "action": "continue_selected",
        "_selected_action": ids,
        "bulk_key": "admin-bulk-1",
        "apply": "1",
        "reason": "reviewed the batch",
        "evidence_ref": "ticket:OPS-77",
        "declaration": "on",
        **{f"revision_{i}": str(s.instance.revision) for i, s in zip(ids, (refused, other), strict=True)},
        # As if both were eligible when the page was read: the commit's own checks still refuse the one.
        **{f"eligible_{i}": "1" for i in ids},
    }
    html = operator.post(url, data).content.decode()
    assert html.count('class="refused"') == 1 and html.count('class="ok"') == 1
    assert "FAILED_PRECONDITION" in html
    other.instance.refresh_from_db()
    refused_after = type(refused.instance).objects.get(id=refused.instance.id)
    assert other.instance.state == "RUNNING"
    assert refused_after.revision == refused.instance.revision
    again = operator.post(url, data).content.decode()
    assert "applied earlier (same key, nothing done twice)" in again


def test_a_step_lists_only_the_operations_of_its_kind_and_controls_only_what_can_succeed(operator, tenancy):
    state = task_failed_state(tenancy)
    html = operator.get(_page(state.instance.id)).content.decode()
    assert 'data-operation="retry-step"' in html and 'data-refused="review-task"' in html
    assert "continue-poll" not in html and "rearm-wait" not in html  # a TASK step is never polled nor waits
    assert 'data-control="pause"' in html and 'data-control="cancel"' in html and 'data-control="resume"' not in html

    paused = task_failed_state(tenancy, paused=True)
    html = operator.get(_page(paused.instance.id)).content.decode()
    assert 'data-control="resume"' in html and 'data-control="pause"' not in html

    cancelling = cancel_unknown_state(tenancy)
    html = operator.get(_page(cancelling.instance.id)).content.decode()
    assert 'data-control="pause"' in html and 'data-control="cancel"' not in html

    WorkflowInstance.objects.filter(pk=state.instance.id).update(state=InstanceState.CANCELLED)
    assert "data-control=" not in operator.get(_page(state.instance.id)).content.decode()


def test_a_refused_control_says_why_once(operator, tenancy):
    state = task_failed_state(tenancy, paused=True)
    url = f"/admin/history/workflowinstance/{state.instance.id}/control/pause/"
    data = {"expected_control_revision": state.instance.control_revision, "reason": "maintenance"}
    html = operator.post(url, data).content.decode()
    assert html.count("the instance is already paused") == 1 and 'id="refusal"' in html


def test_bulk_previews_each_instance_and_submits_only_the_eligible_ones(operator, tenancy, issue_token):
    recoverer = identity_of_credential(issue_token(scopes=[Scope.RECOVER]).credential)
    ineligible = task_unknown_state(tenancy)
    ready = task_failed_state(tenancy)
    step_retry(identity=recoverer, instance_id=ready.instance.id, idempotency_key="k1", command=rq.retry(ready))
    ids = [ineligible.instance.id, ready.instance.id]
    url = "/admin/history/workflowinstance/"
    before = history_digest()
    html = operator.post(url, {"action": "continue_selected", "_selected_action": ids}).content.decode()
    assert history_digest() == before  # previews write nothing
    assert '<strong id="bulk-eligible">1 of 2 eligible</strong>' in html
    row = {i: html.split(f'<tr data-instance="{i}"')[1].split("</tr>")[0] for i in ids}
    assert 'class="ineligible"' in row[ineligible.instance.id] and "not eligible:" in row[ineligible.instance.id]
    assert (
        'class="eligible"' in row[ready.instance.id]
        and "instance.state NEEDS_REVIEW → RUNNING" in row[ready.instance.id]
    )
    assert f'name="eligible_{ready.instance.id}" value="1"' in html
    assert f'name="eligible_{ineligible.instance.id}"' not in html
    assert "a bulk action takes at most 200" in html

    posted = dict(re.findall(r'name="((?:revision|eligible)_[0-9a-f]+)" value="([^"]*)"', html))
    data = {"action": "continue_selected", "_selected_action": ids, "bulk_key": "admin-bulk-2", "apply": "1"}
    data |= {"reason": "reviewed the batch", "evidence_ref": "ticket:OPS-78", "declaration": "on", **posted}
    html = operator.post(url, data).content.decode()
    assert html.count('class="skipped"') == 1 and html.count('class="ok"') == 1
    assert type(ineligible.instance).objects.get(id=ineligible.instance.id).revision == ineligible.instance.revision


def test_a_bulk_action_over_more_than_the_cap_says_which_it_handles(operator, tenancy, monkeypatch):
    monkeypatch.setattr(console_admin, "BULK_CAP", 1)
    states = [task_unknown_state(tenancy), task_unknown_state(tenancy)]
    ids = sorted(s.instance.id for s in states)
    html = operator.post(
        "/admin/history/workflowinstance/", {"action": "continue_selected", "_selected_action": ids}
    ).content.decode()
    assert "More than 1 instances are selected: the first 1 by id are handled here" in html
    assert f'<tr data-instance="{ids[0]}"' in html and f'<tr data-instance="{ids[1]}"' not in html
    assert 'id="bulk-none"' in html  # neither is eligible: nothing to submit
