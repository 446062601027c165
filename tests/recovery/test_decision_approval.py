"""Four eyes over a decision: under a policy that covers any operation of its chain, the whole decision is what is
proposed and approved. Nothing runs while it waits; once a second person approves it, its steps run unheld, each
audited with the approval; rejected or expired, nothing ever runs."""

import datetime as dt

import pytest

from core import clock
from core.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from core.identity import Identity
from engine.check import invariants_check
from engine.demo import demo_run
from engine.runner import runner_pass, runner_settle
from history.models import ApprovalPolicy, Decision, Namespace, Proposal, Scope, WorkflowInstance, WorkflowOperation
from recovery.decisions import decision_approve, decision_make, decision_reject

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """The demo, a policy on ResolveStep alone, the maker and a second person of the namespace."""
    scenarios = demo_run(namespace="demo")["scenarios"]
    namespace = Namespace.objects.get(name="demo")
    ApprovalPolicy.objects.create(namespace=namespace, operation="resolve-step", approvals_required=1)

    def person(letter: str) -> Identity:
        return Identity(
            namespace_id=namespace.id, actor_id=letter * 32, scopes=frozenset({Scope.RECOVER, Scope.READ}), queues=None
        )

    return scenarios, person("a"), person("b")


def _make(world, scenario="task_unknown", key="d-1"):
    scenarios, maker, _ = world
    instance = WorkflowInstance.objects.get(id=scenarios[scenario]["instance_id"])
    command = {
        "kind": "conclude",
        "step_key": scenarios[scenario]["step_key"],
        "expected_revision": str(instance.revision),
        "reason": "the provider confirms the charge",
        "evidence_ref": "ticket:OPS-42",
        "declared": True,
        "conclusion": "SUCCEEDED",
        "result": {"paid": True},
    }
    decision, _ = decision_make(identity=maker, instance_id=instance.id, idempotency_key=key, command=command)
    return decision, instance


def _answer(service, world, decision, who, key="a-1", **command):
    return service(
        identity=who, instance_id=decision.workflow_id, decision_id=decision.id, idempotency_key=key, command=command
    )


def test_a_decision_under_a_policy_waits_whole_and_runs_nothing(world):
    # The policy names ResolveStep only, the chain's second step: still nothing of the chain runs, ReviewTask included.
    decision, instance = _make(world)
    assert (decision.state, decision.steps, decision.expires_at is not None) == ("PROPOSED", [], True)
    runner_settle()
    instance.refresh_from_db()
    assert (instance.state, Decision.objects.get(pk=decision.pk).state) == ("NEEDS_REVIEW", "PROPOSED")
    since = WorkflowOperation.objects.filter(workflow_id=instance.id, created_at__gte=decision.created_at)
    assert list(since.values_list("action", "evidence_ref")) == [("workflow.decision_proposed", "ticket:OPS-42")]
    assert not Proposal.objects.exists()  # the decision is the proposal: no operation is held on its own


def test_the_maker_cannot_approve_their_own_decision(world):
    decision, _ = _make(world)
    with pytest.raises(PermissionDenied, match="its maker cannot approve it"):
        _answer(decision_approve, world, decision, world[1])
    assert Decision.objects.get(pk=decision.pk).state == "PROPOSED"


def test_an_approved_decision_runs_its_chain_unheld_each_step_audited_with_the_approval(world):
    _, maker, second = world
    decision, instance = _make(world)
    approved, receipt = _answer(decision_approve, world, decision, second, reason="looked at it")
    assert (approved.state, receipt.replayed) == ("RUNNING", False)
    assert approved.approval["outcome"] == "APPROVED" and approved.approval["by"] == second.actor_id
    assert [s["operation"] for s in approved.steps] == ["review-task"]
    runner_settle()
    approved.refresh_from_db()
    assert approved.state == "SUCCEEDED"
    assert [s["operation"] for s in approved.steps] == ["review-task", "resolve-step", "continue"]
    instance.refresh_from_db()
    assert instance.state == "SUCCEEDED" and not Proposal.objects.exists()
    steps = WorkflowOperation.objects.filter(operation_id__in=[s["operation_id"] for s in approved.steps])
    covered = {"id": approved.id, "made_by": maker.actor_id, "approved_by": second.actor_id}
    assert [s.after["decision"] for s in steps] == [covered] * 3
    assert {s.actor_id for s in steps} == {maker.actor_id}
    assert WorkflowOperation.objects.filter(action="workflow.decision_approved", actor_id=second.actor_id).count() == 1
    assert [str(v) for v in invariants_check()] == []


def test_an_approval_again_with_its_key_runs_nothing_twice(world):
    decision, _ = _make(world)
    _answer(decision_approve, world, decision, world[2])
    runner_settle()
    audits = WorkflowOperation.objects.count()
    again, receipt = _answer(decision_approve, world, decision, world[2])
    assert (receipt.replayed, again.state, WorkflowOperation.objects.count()) == (True, "SUCCEEDED", audits)


def test_a_second_answer_names_who_answered_first(world):
    decision, _ = _make(world)
    _answer(decision_reject, world, decision, world[2], reason="the ticket says otherwise")
    with pytest.raises(FailedPrecondition, match="rejected by " + "b" * 32):
        _answer(decision_approve, world, decision, world[2], key="a-2")


def test_a_rejected_or_withdrawn_decision_never_runs(world):
    decision, instance = _make(world)
    rejected, _ = _answer(decision_reject, world, decision, world[1], reason="withdrawn: wrong step")
    assert rejected.state == "REJECTED" and rejected.approval["note"] == "withdrawn: wrong step"
    runner_settle()
    instance.refresh_from_db()
    assert instance.state == "NEEDS_REVIEW" and Decision.objects.get(pk=decision.pk).steps == []


def test_a_rejection_needs_its_reason(world):
    decision, _ = _make(world)
    with pytest.raises(InvalidArgument) as refused:
        _answer(decision_reject, world, decision, world[2])
    assert refused.value.field == "reason" and Decision.objects.get(pk=decision.pk).state == "PROPOSED"


def test_an_approval_after_the_instance_moved_is_refused_naming_what_moved_it(world):
    _, maker, second = world
    decision, instance = _make(world)
    # A colleague acts on the instance the one-by-one way meanwhile.
    WorkflowInstance.objects.filter(pk=instance.pk).update(revision=instance.revision + 1)
    with pytest.raises(Aborted, match="moved since it was made.*nothing ran"):
        _answer(decision_approve, world, decision, second)
    assert Decision.objects.get(pk=decision.pk).state == "PROPOSED"


def test_an_unanswered_decision_expires_and_cannot_be_approved_after(world, monkeypatch):
    decision, _ = _make(world)
    later = decision.expires_at + dt.timedelta(seconds=1)
    monkeypatch.setattr(clock, "now", lambda: later)
    with pytest.raises(FailedPrecondition, match="expired at"):
        _answer(decision_approve, world, decision, world[2])
    runner_pass()
    assert Decision.objects.get(pk=decision.pk).state == "EXPIRED"
    with pytest.raises(FailedPrecondition, match="nobody approved it before"):
        _answer(decision_approve, world, decision, world[2], key="a-2")


def test_an_answer_to_no_decision_of_this_workflow_is_not_found(world):
    decision, _ = _make(world)
    other = world[0]["poll_exhausted"]["instance_id"]
    with pytest.raises(NotFound) as refused:
        decision_approve(identity=world[2], instance_id=other, decision_id=decision.id, idempotency_key="x", command={})
    assert refused.value.field == "decision_id"


def test_without_a_policy_a_decision_runs_at_once(world):
    ApprovalPolicy.objects.all().delete()
    decision, _ = _make(world)
    assert decision.state == "RUNNING" and decision.approval is None and decision.expires_at is None
