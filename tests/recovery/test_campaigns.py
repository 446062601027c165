"""Repair campaigns: one decision over a frozen selection, run by the runner item by item — the canary first, then
widened — with a ledger per item; an instance that moved is skipped, too many refusals halt it, and a second
person approves it as a whole under four eyes."""

import datetime as dt
import re

import pytest

from core import clock
from core.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from core.identity import Identity
from engine.check import invariants_check
from engine.runner import runner_pass, runner_settle
from history.metrics import metrics_text
from history.models import (
    ApprovalPolicy,
    Campaign,
    CampaignItem,
    CampaignState,
    Decision,
    InstanceState,
    ItemOutcome,
    Scope,
    WorkflowInstance,
)
from recovery.campaigns import (
    campaign_again,
    campaign_get,
    campaign_make,
    campaign_move,
    campaign_preview,
    campaign_tally,
)
from recovery.decisions import decision_make
from testkit import states
from testkit.driver import task_step

pytestmark = pytest.mark.django_db

SCOPES = frozenset({Scope.RECOVER, Scope.READ})


def _operator(tenancy, actor: str = "d") -> Identity:
    return Identity(namespace_id=tenancy[0].id, actor_id=actor * 32, scopes=SCOPES, queues=None)


def _unknown(tenancy, n: int) -> list[WorkflowInstance]:
    """``n`` instances in review, each with the outcome of its task's only attempt unknown."""
    return [states.task_unknown_state(tenancy).instance for _ in range(n)]


def _command(**fields) -> dict:
    return {
        "title": "card gateway outage of 4 Dec",
        "kind": "conclude",
        "step_key": "charge",
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
        "reason": "the gateway's settlement report lists every charge as paid",
        "evidence_ref": "ticket:OPS-77",
        "declared": True,
        "rate_per_second": 1000,
        **fields,
    }


def _made(tenancy, instances, operator=None, **fields) -> Campaign:
    return campaign_make(
        identity=operator or _operator(tenancy),
        instances=WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances]),
        source="a test's selection",
        command=_command(**fields),
        owner="olga",
    )


def _move(tenancy, campaign, action, actor="d", **extra) -> Campaign:
    return campaign_move(identity=_operator(tenancy, actor), campaign_id=campaign.id, action=action, by=actor, **extra)


def _outcomes(campaign) -> dict[str, int]:
    return {outcome: n for outcome, n in campaign_tally(campaign).counts.items() if n}


def test_the_canary_runs_first_then_widens_itself_once_its_repairs_worked(tenancy):
    instances = _unknown(tenancy, 6)
    campaign = _made(tenancy, instances, canary_size=2)
    assert (campaign.state, campaign.total) == (CampaignState.READY, 6)
    (group,) = campaign_preview(campaign)
    assert (group.verdict, group.count) == ("would be decided", 6)
    assert [judged for _, judged in group.samples] == ["review-task possible"] * 3
    runner_settle()
    assert _outcomes(campaign) == {ItemOutcome.PENDING: 6}  # nothing runs before it is started
    _move(tenancy, campaign, "started")
    runner_pass()  # the canary's decisions are made; their chains and the verdicts on them follow
    campaign.refresh_from_db()
    assert campaign.state == CampaignState.CANARY_DONE
    canary = CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.APPLIED)
    assert sorted(canary.values_list("position", flat=True)) == [0, 1]
    gauges = metrics_text().decode()
    assert 'weave_campaigns{namespace="acme",state="CANARY_DONE"} 1.0' in gauges
    for outcome, n in (("APPLIED", 2), ("PENDING", 4)):
        assert f'weave_campaign_items{{campaign="{campaign.id}",namespace="acme",outcome="{outcome}"}} {n}.0' in gauges
    runner_settle()  # both canary repairs judged effective: it widens itself
    campaign.refresh_from_db()
    assert (campaign.state, _outcomes(campaign)) == (CampaignState.DONE, {ItemOutcome.APPLIED: 6})
    assert [entry["action"] for entry in campaign.log] == ["made", "started", "canary_done", "widened", "done"]
    assert campaign.log[3]["by"] == "the campaign"
    # Each item's receipt is its decision, made under the campaign's key, run to the end by the runner.
    for item in CampaignItem.objects.filter(campaign=campaign).select_related("decision"):
        assert item.decision.state == "SUCCEEDED" and item.decision.reason == campaign.reason
    assert set(WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances]).values_list("state", flat=True)) == {
        InstanceState.SUCCEEDED
    }
    assert [str(v) for v in invariants_check()] == []


def test_an_instance_repaired_by_hand_meanwhile_is_skipped_with_its_state_now(tenancy):
    instances = _unknown(tenancy, 3)
    campaign = _made(tenancy, instances)
    by_hand = WorkflowInstance.objects.get(pk=instances[1].pk)
    command = {key: value for key, value in _command().items() if key not in ("title", "rate_per_second")}
    decision_make(
        identity=_operator(tenancy, "e"),
        instance_id=by_hand.id,
        idempotency_key="by-hand",
        command={**command, "expected_revision": str(by_hand.revision)},
    )
    groups = {group.verdict: group.count for group in campaign_preview(campaign)}
    assert groups == {"would be decided": 2, "skipped: the instance moved since it was frozen": 1}
    _move(tenancy, campaign, "started")
    runner_settle()
    skipped = CampaignItem.objects.get(campaign=campaign, instance_id=by_hand.id)
    assert (skipped.outcome, skipped.code, skipped.decision_id) == (ItemOutcome.SKIPPED, "ABORTED", None)
    # Why, and the state it was in when the campaign came to it (the runner has moved it on since).
    assert re.fullmatch(
        rf"the instance moved since you looked: revision {by_hand.revision} → .*; now RUNNING at revision \d+",
        skipped.detail,
    )
    assert _outcomes(campaign) == {ItemOutcome.APPLIED: 2, ItemOutcome.SKIPPED: 1}
    assert Decision.objects.filter(workflow_id=by_hand.id).count() == 1  # only the hand's


def test_too_many_refusals_halt_the_campaign_which_says_why_and_again_takes_them_up(tenancy, engine):
    in_review = _unknown(tenancy, 4)
    definition = engine.define([task_step("charge")])
    running = [engine.start(definition) for _ in range(4)]  # their tasks queued: nothing to conclude
    runner_settle()
    campaign = _made(tenancy, [*in_review, *running], canary_size=8, halt_percent=10)
    groups = {group.verdict: group.count for group in campaign_preview(campaign)}
    assert groups == {"would be decided": 4, "refused: the instance is not in review": 4}
    _move(tenancy, campaign, "started")
    runner_settle()
    campaign.refresh_from_db()
    counts = campaign_tally(campaign).counts
    run = campaign.total - counts[ItemOutcome.PENDING]
    # Any five of the eight hold a refusal: it halts at the fifth item at the latest, and says why.
    assert campaign.state == CampaignState.HALTED and run <= 5 and counts[ItemOutcome.REFUSED] >= 1
    assert campaign.halted_reason.startswith(f"{counts[ItemOutcome.REFUSED]} of {run} items run were refused")
    assert "more than 10 %; most often FAILED_PRECONDITION" in campaign.halted_reason
    assert campaign.log[-1]["action"] == "halted"
    refused = CampaignItem.objects.filter(campaign=campaign, outcome=ItemOutcome.REFUSED).first()
    assert refused.instance_id in {i.id for i in running} and refused.detail
    with pytest.raises(FailedPrecondition, match="a HALTED campaign cannot be widened"):
        _move(tenancy, campaign, "widened")
    _move(tenancy, campaign, "cancelled", note="wrong selection: half of it is not in review")
    cancelled = CampaignItem.objects.filter(campaign=campaign, code="CANCELLED")
    assert cancelled.count() == counts[ItemOutcome.PENDING] and {i.outcome for i in cancelled} == {ItemOutcome.SKIPPED}
    child = campaign_again(identity=_operator(tenancy), campaign_id=campaign.id, owner="olga")
    taken_up = {i.instance_id for i in CampaignItem.objects.filter(campaign=campaign).exclude(outcome="APPLIED")}
    assert child.parent_id == campaign.id and child.state == CampaignState.READY
    assert set(CampaignItem.objects.filter(campaign=child).values_list("instance_id", flat=True)) == taken_up


def test_a_paused_campaign_takes_nothing_until_resumed_and_the_rate_paces_it(tenancy):
    instances = _unknown(tenancy, 4)
    campaign = _made(tenancy, instances, rate_per_second=1)
    _move(tenancy, campaign, "started")
    runner_pass()
    assert _outcomes(campaign) == {ItemOutcome.APPLIED: 1, ItemOutcome.PENDING: 3}  # one a second
    _move(tenancy, campaign, "paused")
    clock.advance(dt.timedelta(seconds=10))
    runner_settle()
    assert campaign_tally(campaign).counts[ItemOutcome.PENDING] == 3
    _move(tenancy, campaign, "resumed")
    clock.advance(dt.timedelta(seconds=10))
    runner_settle()
    campaign.refresh_from_db()
    assert (campaign.state, _outcomes(campaign)) == (CampaignState.DONE, {ItemOutcome.APPLIED: 4})
    with pytest.raises(FailedPrecondition, match="a DONE campaign cannot be paused"):
        _move(tenancy, campaign, "paused")


def test_under_four_eyes_a_second_person_approves_the_campaign_and_widens_it(tenancy):
    ApprovalPolicy.objects.create(namespace=tenancy[0], operation="review-task", approvals_required=1)
    instances = _unknown(tenancy, 3)
    campaign = _made(tenancy, instances, canary_size=1)
    assert (campaign.state, campaign.four_eyes) == (CampaignState.PROPOSED, True)
    with pytest.raises(FailedPrecondition, match="a PROPOSED campaign cannot be started"):
        _move(tenancy, campaign, "started")
    with pytest.raises(PermissionDenied, match="by a second person, not its maker"):
        _move(tenancy, campaign, "approved")
    _move(tenancy, campaign, "approved", actor="f", note="preview read: 3 would be decided")
    _move(tenancy, campaign, "started")
    runner_settle()
    with pytest.raises(PermissionDenied):
        _move(tenancy, campaign, "widened")
    _move(tenancy, campaign, "widened", actor="f", note="the canary's instance succeeded")
    runner_settle()
    campaign.refresh_from_db()
    assert (campaign.state, _outcomes(campaign)) == (CampaignState.DONE, {ItemOutcome.APPLIED: 3})
    # The items' decisions ran unheld, each carrying the campaign's approval.
    decisions = Decision.objects.filter(workflow_id__in=[i.pk for i in instances])
    assert {(d.state, d.approval["by"], d.approval["note"]) for d in decisions} == {
        ("SUCCEEDED", "f" * 32, f"campaign {campaign.id}")
    }


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"title": ""}, "title"),
        ({"canary_size": 0}, "canary_size"),
        ({"halt_percent": 101}, "halt_percent"),
        ({"kind": "guess"}, "kind"),
        ({"expected_revision": "3"}, "expected_revision"),
        ({"declared": False}, "declared"),
        ({"reason": ""}, "reason"),
    ],
)
def test_a_bad_field_is_named_and_nothing_is_made(tenancy, fields, field):
    instances = _unknown(tenancy, 1)
    with pytest.raises(InvalidArgument) as refused:
        _made(tenancy, instances, **fields)
    assert refused.value.field == field
    assert not Campaign.objects.exists()


def test_an_empty_selection_is_refused_and_a_campaign_stays_within_its_makers_queues(tenancy):
    with pytest.raises(NotFound) as refused:
        _made(tenancy, [])
    assert refused.value.field == "selection" and not Campaign.objects.exists()
    campaign = _made(tenancy, _unknown(tenancy, 1))
    narrow = Identity(namespace_id=tenancy[0].id, actor_id="e" * 32, scopes=SCOPES, queues=frozenset({"polls"}))
    with pytest.raises(NotFound):
        campaign_get(identity=narrow, campaign_id=campaign.id)
