"""Decisions: each demo scenario's review decided once, run as the chain of operations its seeds require.

Each decision is made as an operator makes it (the revision they saw, reason, evidence, one declaration); the
steps that can run at once run in the call, the rest as the runner takes in each step; every step is an
operation of its own in the workflow audit, under the decision's key for that step.
"""

import pytest

from core import exactjson
from core.errors import Aborted, InvalidArgument, NotFound
from core.identity import Identity
from engine.check import invariants_check
from engine.demo import demo_run
from engine.runner import runner_pass, runner_settle
from history.models import Decision, Namespace, Scope, WorkflowInstance, WorkflowOperation
from recovery.consequences import decision_consequences
from recovery.decisions import decision_drive, decision_make
from recovery.operations import OPERATIONS
from tests.recovery.digest import history_digest

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    result = demo_run(namespace="demo")
    namespace = Namespace.objects.get(name=result["namespace"])
    operator = Identity(
        namespace_id=namespace.id, actor_id="d" * 32, scopes=frozenset({Scope.RECOVER, Scope.READ}), queues=None
    )
    return result["scenarios"], operator


def command_of(demo, scenario: str, kind: str, **outcome) -> dict:
    scenarios, _ = demo
    instance = WorkflowInstance.objects.get(id=scenarios[scenario]["instance_id"])
    return {
        "kind": kind,
        "step_key": scenarios[scenario]["step_key"],
        "expected_revision": str(instance.revision),
        "reason": f"{scenario}: checked with the provider",
        "evidence_ref": "ticket:OPS-42",
        "declared": True,
        **outcome,
    }


def decide(demo, scenario: str, kind: str, key: str = "", **outcome):
    scenarios, operator = demo
    decision, _ = decision_make(
        identity=operator,
        instance_id=scenarios[scenario]["instance_id"],
        idempotency_key=key or f"decide-{scenario}",
        command=command_of(demo, scenario, kind, **outcome),
    )
    return decision


def _operations(decision: Decision) -> list[str]:
    return [step["operation"] for step in Decision.objects.get(pk=decision.pk).steps]


# scenario, kind, outcome, the operations run in the call, then after the runner, the instance's end
CASES = [
    (
        "task_unknown",
        "conclude",
        {"conclusion": "SUCCEEDED", "result": {"paid": True}},
        ["review-task"],
        ["review-task", "resolve-step", "continue"],
        "SUCCEEDED",
    ),
    (
        "poll_exhausted",
        "conclude",
        {"conclusion": "SUCCEEDED", "result": {"status": "done"}},
        ["resolve-step", "continue"],
        ["resolve-step", "continue"],
        "SUCCEEDED",
    ),
    (
        "cancel_unknown",
        "conclude",
        {"conclusion": "SUCCEEDED", "result": {"paid": False}},
        ["review-task"],
        ["review-task", "resolve-step", "continue"],
        "CANCELLED",
    ),
    (
        "expired_in_review",
        "conclude",
        {"conclusion": "FAILED", "result": {"error": "declined"}},
        ["resolve-step", "continue"],
        ["resolve-step", "continue"],
        "FAILED",
    ),
    ("task_failed_budget_left", "retry", {}, ["retry-step", "continue"], ["retry-step", "continue"], "RUNNING"),
    ("poll_request_failed", "retry", {}, ["retry-step", "continue"], ["retry-step", "continue"], "RUNNING"),
    ("signal_rearm", "rearm", {}, ["rearm-wait", "continue"], ["rearm-wait", "continue"], "RUNNING"),
    (
        "poll_pending_review",
        "keep-polling",
        {"result": {"status": "pending"}},
        ["review-task"],
        ["review-task", "continue-poll", "continue"],
        "RUNNING",
    ),
]


@pytest.mark.parametrize(("scenario", "kind", "outcome", "at_once", "chain", "end"), CASES, ids=[c[0] for c in CASES])
def test_each_scenario_is_decided_once_and_its_chain_runs_to_the_end(
    demo, scenario, kind, outcome, at_once, chain, end
):
    decision = decide(demo, scenario, kind, **outcome)
    assert _operations(decision) == at_once
    runner_settle()
    decision.refresh_from_db()
    assert (decision.state, _operations(decision), decision.refusal) == ("SUCCEEDED", chain, None)
    instance = WorkflowInstance.objects.get(id=decision.workflow_id)
    assert instance.state == end or (end == "RUNNING" and instance.state in ("RUNNING", "SUCCEEDED"))
    # Each step is an operation of its own in the audit, with the decision's reason and evidence.
    audits = WorkflowOperation.objects.filter(operation_id__in=[s["operation_id"] for s in decision.steps])
    assert sorted(a.action for a in audits) == sorted(OPERATIONS[name].action for name in chain)
    assert {(a.reason, a.evidence_ref) for a in audits} == {(decision.reason, "ticket:OPS-42")}
    assert [str(v) for v in invariants_check()] == []


@pytest.mark.parametrize(("scenario", "kind", "outcome", "at_once", "chain", "end"), CASES, ids=[c[0] for c in CASES])
def test_the_preview_runs_the_whole_chain_with_the_background_between_its_steps_and_writes_nothing(
    demo, scenario, kind, outcome, at_once, chain, end
):
    scenarios, operator = demo
    before = history_digest()
    preview = decision_consequences(
        identity=operator,
        instance_id=scenarios[scenario]["instance_id"],
        command=command_of(demo, scenario, kind, **outcome),
    )
    assert history_digest() == before
    assert [step.operation for step in preview] == [OPERATIONS[name].title for name in chain]
    assert all(step.refusal is None and step.rows for step in preview)
    # The last step lifts the review: the instance leaves NEEDS_REVIEW (for the background to go on).
    instance_rows = {what: after for what, _, after in preview[-1].rows}
    assert instance_rows["instance"] != "NEEDS_REVIEW"


def test_a_preview_that_would_be_refused_says_where_and_why_and_a_stale_one_is_aborted(demo):
    scenarios, operator = demo
    instance_id = scenarios["expired_in_review"]["instance_id"]
    preview = decision_consequences(
        identity=operator, instance_id=instance_id, command=command_of(demo, "expired_in_review", "retry")
    )
    assert [(step.operation, step.refusal.code) for step in preview] == [("", "FAILED_PRECONDITION")]
    assert "Retry step:" in preview[0].refusal.message
    stale = command_of(demo, "expired_in_review", "retry") | {"expected_revision": "1"}
    with pytest.raises(Aborted):
        decision_consequences(identity=operator, instance_id=instance_id, command=stale)


def test_a_decision_made_on_a_view_the_instance_has_left_names_what_moved_it(demo):
    decide(demo, "poll_exhausted", "conclude", conclusion="SUCCEEDED", result={"status": "done"})
    scenarios, operator = demo
    stale = {
        "kind": "retry",
        "step_key": "settle",
        "expected_revision": "1",
        "reason": "a second tab",
        "evidence_ref": "ticket:OPS-42",
        "declared": True,
    }
    with pytest.raises(Aborted) as refused:
        decision_make(
            identity=operator,
            instance_id=scenarios["poll_exhausted"]["instance_id"],
            idempotency_key="tab-2",
            command=stale,
        )
    assert "the last operation was workflow.continue by " + "d" * 32 in refused.value.message


def test_a_refused_step_ends_the_chain_saying_where_and_why(demo):
    # Past its deadline an instance starts no new work, and nothing is resolved for Continue: nothing runs.
    decision = decide(demo, "expired_in_review", "retry")
    assert decision.state == "REFUSED" and decision.steps == []
    assert decision.refusal["code"] == "FAILED_PRECONDITION"
    assert "Retry step:" in decision.refusal["message"] and "Continue instance:" in decision.refusal["message"]


def test_the_same_key_and_command_answer_the_same_decision_and_run_nothing_again(demo):
    first = decide(demo, "poll_exhausted", "conclude", conclusion="SUCCEEDED", result={"status": "done"})
    audits = WorkflowOperation.objects.count()
    scenarios, operator = demo
    again, receipt = decision_make(
        identity=operator,
        instance_id=first.workflow_id,
        idempotency_key="decide-poll_exhausted",
        command=exactjson.loads(first.command),
    )
    assert (again.pk, receipt.replayed, WorkflowOperation.objects.count()) == (first.pk, True, audits)


def test_a_driver_killed_after_a_step_committed_records_it_from_its_receipt(demo, monkeypatch):
    decision = decide(demo, "task_unknown", "conclude", conclusion="SUCCEEDED", result={"paid": True})
    runner_pass()  # the inbox pass takes in the review; the decision pass runs ResolveStep and Continue
    decision.refresh_from_db()
    # Forget the last step as if the driver died before recording it: its receipt is under the step's key.
    Decision.objects.filter(pk=decision.pk).update(steps=decision.steps[:-1], state="RUNNING")
    assert decision_drive(decision.pk)
    decision.refresh_from_db()
    assert _operations(decision) == ["review-task", "resolve-step", "continue"] and decision.state == "SUCCEEDED"
    assert WorkflowOperation.objects.filter(action="workflow.continue", workflow_id=decision.workflow_id).count() == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "guess"}, "kind"),
        ({"declared": False}, "declared"),
        ({"result": {"paid": True}}, "result"),
        ({"step_key": "nowhere"}, "step_key"),
    ],
)
def test_a_bad_decision_is_refused_naming_its_field_and_nothing_is_stored(demo, change, field):
    scenarios, operator = demo
    command = {
        "kind": "retry",
        "step_key": "charge",
        "expected_revision": str(
            WorkflowInstance.objects.get(id=scenarios["task_failed_budget_left"]["instance_id"]).revision
        ),
        "reason": "r",
        "evidence_ref": "e",
        "declared": True,
    } | change
    with pytest.raises((InvalidArgument, NotFound)) as refused:
        decision_make(
            identity=operator,
            instance_id=scenarios["task_failed_budget_left"]["instance_id"],
            idempotency_key="bad",
            command=command,
        )
    assert refused.value.field == field and not Decision.objects.exists()
