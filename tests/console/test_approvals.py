"""Four-eyes approval in the console: policies by the approvers group, proposals on the page and the queue."""

import pytest
from django.test import Client

from history.models import ApprovalPolicy, Proposal, ProposalState, Task, TaskState, WorkflowInstance
from testkit.states import task_unknown_state
from tests.console.test_recovery_forms import _form, _page, _review_post
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def policy(tenancy):
    return ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task")


def _proposal_url(instance_id, proposal_id):
    return f"/admin/history/workflowinstance/{instance_id}/proposals/{proposal_id}/"


def _proposed(tenancy, console_user, policy):
    """A ReviewTask confirmed by olga where a policy holds it: the state, olga's client and the proposal."""
    state = task_unknown_state(tenancy)
    olga = _logged_in(console_user("olga", "operators"))
    answer = olga.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"}, follow=True)
    assert "needs a second person&#x27;s approval" in answer.content.decode()
    return state, olga, Proposal.objects.get(workflow_id=state.instance.id)


def test_only_the_approvers_group_manages_the_policies(tenancy, console_user):
    add = "/admin/history/approvalpolicy/add/"
    assert _logged_in(console_user("olga", "operators")).get(add).status_code == 403
    anna = _logged_in(console_user("anna", "approvers"))
    assert (
        anna.post(add, {"definition_name": "", "operation": "retry-step", "approvals_required": "1"}).status_code == 302
    )
    policy = ApprovalPolicy.objects.get()
    assert (policy.namespace_id, policy.operation) == (tenancy[0].id, "retry-step")
    again = anna.post(add, {"definition_name": "", "operation": "retry-step", "approvals_required": "0"})
    assert again.status_code == 200 and "already exists" in again.content.decode()
    unknown = anna.post(add, {"definition_name": "", "operation": "reboot", "approvals_required": "1"})
    assert "Select a valid choice" in unknown.content.decode() and ApprovalPolicy.objects.count() == 1


def test_a_confirmed_form_becomes_a_proposal_shown_on_the_page_and_the_queue(tenancy, console_user, policy):
    state, olga, proposal = _proposed(tenancy, console_user, policy)
    assert WorkflowInstance.objects.get(pk=state.instance.pk).revision == state.instance.revision
    assert Task.objects.get(pk=state.task.pk).state == TaskState.NEEDS_REVIEW
    page = olga.get(_page(state.instance.id)).content.decode()
    assert f'data-proposal="{proposal.id}"' in page and "olga (operators)" in page
    assert f'data-proposal="{proposal.id}"' in olga.get("/admin/").content.decode()
    own = olga.get(_proposal_url(state.instance.id, proposal.id)).content.decode()
    assert 'id="own-proposal"' in own and 'id="approve"' not in own and 'id="proposal-command"' in own


def test_a_second_person_approves_on_the_proposal_page_and_the_operation_runs(tenancy, console_user, policy):
    state, _, proposal = _proposed(tenancy, console_user, policy)
    anna = _logged_in(console_user("anna", "approvers"))
    url = _proposal_url(state.instance.id, proposal.id)
    page = anna.get(url).content.decode()
    assert 'id="approve"' in page and 'id="consequences"' in page
    done = anna.post(url, {"_approve": "1", "reason": "", "idempotency_key": "admin-approve-1"}, follow=True)
    assert "approved and applied" in done.content.decode()
    assert Task.objects.get(pk=state.task.pk).review_conclusion == "SUCCEEDED"
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.APPROVED


def test_a_stale_proposal_is_refused_on_the_page_and_nothing_is_written(tenancy, console_user, policy):
    state, _, proposal = _proposed(tenancy, console_user, policy)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(revision=state.instance.revision + 1)
    anna = _logged_in(console_user("anna", "approvers"))
    url = _proposal_url(state.instance.id, proposal.id)
    assert "stale: the instance moved since" in anna.get(_page(state.instance.id)).content.decode()
    assert 'id="now-refused"' in anna.get(url).content.decode()
    before = history_digest()
    answer = anna.post(url, {"_approve": "1", "idempotency_key": "admin-approve-2"}).content.decode()
    assert "ABORTED" in answer and "the proposer can submit it again" in answer
    assert history_digest() == before


def test_a_rejection_needs_a_reason_and_runs_nothing(tenancy, console_user, policy):
    state, _, proposal = _proposed(tenancy, console_user, policy)
    anna = _logged_in(console_user("anna", "approvers"))
    url = _proposal_url(state.instance.id, proposal.id)
    refused = anna.post(url, {"_reject": "1", "reason": "", "idempotency_key": "admin-reject-1"}).content.decode()
    assert "reason" in refused and Proposal.objects.get(pk=proposal.pk).state == ProposalState.PENDING
    anna.post(url, {"_reject": "1", "reason": "refund instead", "idempotency_key": "admin-reject-2"})
    assert Proposal.objects.get(pk=proposal.pk).state == ProposalState.REJECTED
    assert Task.objects.get(pk=state.task.pk).state == TaskState.NEEDS_REVIEW
