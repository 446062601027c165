"""Four-eyes approval in the console: policies by the approvers group, proposals on the page and the queue."""

import datetime as dt
import re
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from console.links import instance_name
from core import clock
from history.models import ApprovalPolicy, Operator, Proposal, ProposalState, Task, TaskState, WorkflowInstance
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
    assert 'id="decision-facts"' in own  # the approver decides on the same facts as the proposer


def test_a_second_person_approves_on_the_proposal_page_and_the_operation_runs(tenancy, console_user, policy):
    state, _, proposal = _proposed(tenancy, console_user, policy)
    anna = _logged_in(console_user("anna", "approvers"))
    url = _proposal_url(state.instance.id, proposal.id)
    page = anna.get(url).content.decode()
    assert 'value="Approve and run Review task" class="default" id="approve"' in page and 'id="consequences"' in page
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


def _propose(client, state, key: str) -> Proposal:
    client.post(_form(state.instance.id, "review-task"), _review_post(state, idempotency_key=key) | {"_confirm": "1"})
    return Proposal.objects.get(workflow_id=state.instance.id)


def _in_tokyo(moment) -> str:
    return f"{moment.astimezone(ZoneInfo('Asia/Tokyo')):%Y-%m-%d %H:%M:%S} JST"


def test_the_proposer_is_told_until_when_the_proposal_waits_in_their_own_zone(tenancy, console_user, policy):
    state = task_unknown_state(tenancy)
    user = console_user("olga", "operators")
    Operator.objects.filter(user=user).update(time_zone="Asia/Tokyo")
    olga = _logged_in(user)
    answer = olga.post(_form(state.instance.id, "review-task"), _review_post(state) | {"_confirm": "1"}, follow=True)
    proposal = Proposal.objects.get(workflow_id=state.instance.id)
    said = re.search(r'<li class="info">(.*?)</li>', answer.content.decode(), re.S).group(1)
    assert f"until {_in_tokyo(proposal.expires_at)}; nothing was run yet." in said and "Z;" not in said


def test_the_home_lists_my_proposals_of_the_last_week_newest_first_with_their_outcome(
    tenancy, console_user, policy, monkeypatch
):
    user = console_user("olga", "operators")
    Operator.objects.filter(user=user).update(time_zone="Asia/Tokyo")
    olga, anna = _logged_in(user), _logged_in(console_user("anna", "approvers"))
    states = [task_unknown_state(tenancy) for _ in range(5)]
    approved, rejected, expired, pending, old = (_propose(olga, s, f"olga-{n}") for n, s in enumerate(states))
    theirs = _propose(anna, task_unknown_state(tenancy), "anna-1")
    now = clock.now()
    for age, proposal in enumerate((pending, expired, rejected, approved)):
        Proposal.objects.filter(pk=proposal.pk).update(created_at=now - dt.timedelta(hours=age + 1))
    Proposal.objects.filter(pk=old.pk).update(created_at=now - dt.timedelta(days=8))
    Proposal.objects.filter(pk=expired.pk).update(expires_at=now - dt.timedelta(minutes=1))
    for proposal, decision in ((approved, {"_approve": "1"}), (rejected, {"_reject": "1", "reason": "refund instead"})):
        anna.post(_proposal_url(proposal.workflow_id, proposal.id), decision | {"idempotency_key": f"d-{proposal.id}"})
    approved.refresh_from_db()

    html = olga.get("/admin/").content.decode()
    box = html.split('id="my-proposals"')[1].split("</section>")[0]
    rows = re.findall(r'<tr data-my-proposal="(\w+)" data-outcome="(\w+)">(.*?)</tr>', box, re.S)
    assert [(pk, outcome) for pk, outcome, _ in rows] == [
        (pending.id, "PENDING"),
        (expired.id, "EXPIRED"),
        (rejected.id, "REJECTED"),
        (approved.id, "APPROVED"),
    ]
    text = {pk: re.sub(r"<[^>]+>", "", unescape(row)) for pk, _, row in rows}
    assert f"APPROVED by anna (approvers) at {_in_tokyo(approved.decided_at)}" in text[approved.id]
    assert "REJECTED by anna (approvers): refund instead" in text[rejected.id]
    assert f"PENDING, expires {_in_tokyo(pending.expires_at)}" in text[pending.id]
    assert instance_name(states[3].instance) in text[pending.id] and theirs.id not in box
    for pk, _, row in rows:
        proposal = Proposal.objects.get(pk=pk)
        assert f'href="{_proposal_url(proposal.workflow_id, pk)}"' in row

    monkeypatch.setattr("console.proposals.MINE_SHOWN", 2)
    shown = re.findall(r'data-my-proposal="(\w+)"', olga.get("/admin/").content.decode())
    assert shown == [pending.id, expired.id]


def test_after_deciding_the_approver_is_led_to_the_instance_and_offered_the_next_proposal_they_may_decide(
    tenancy, console_user, policy
):
    olga, anna = _logged_in(console_user("olga", "operators")), _logged_in(console_user("anna", "approvers"))
    first, second = task_unknown_state(tenancy), task_unknown_state(tenancy)
    one, two = _propose(olga, first, "olga-1"), _propose(olga, second, "olga-2")
    _propose(anna, task_unknown_state(tenancy), "anna-1")  # her own: never offered to her

    done = anna.post(_proposal_url(first.instance.id, one.id), {"_approve": "1", "idempotency_key": "d-1"})
    assert done.status_code == 302 and done["Location"] == _page(first.instance.id)
    said = unescape(re.search(r'<li class="success">(.*?)</li>', anna.get(done["Location"]).content.decode()).group(1))
    two_url = _proposal_url(second.instance.id, two.id)
    assert said.startswith("Review task approved and applied")
    offered = f'<a href="{two_url}" id="next-proposal">Review task — {instance_name(second.instance)}</a>'
    assert f"Next proposal: {offered}" in said

    done = anna.post(two_url, {"_reject": "1", "reason": "refund instead", "idempotency_key": "d-2"}, follow=True)
    said = re.search(r'<li class="success">(.*?)</li>', done.content.decode()).group(1)
    assert said == "Review task rejected: nothing was run." and done.redirect_chain[-1][0] == _page(second.instance.id)
