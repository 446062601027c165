"""The seven recovery scenarios on states the real engine produced (weave_demo), run to their end.

Each scenario goes through the engine's own paths — runner passes and worker claims — between
the operator's decisions, and ends with the invariant checker clean.
"""

import datetime as dt

import pytest

from core import clock
from core.errors import FailedPrecondition
from core.identity import Identity
from engine.check import invariants_check
from engine.demo import POLLS, TASKS, demo_run
from engine.handlers import claim_execute
from engine.runner import runner_settle
from engine.signaling import signal_accept
from engine.worker import task_claim
from history.models import Activation, InboxRecord, Namespace, PollRound, Scope, Signal, Step, Task, WorkflowInstance
from recovery.operations import OPERATIONS

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    result = demo_run(namespace="demo")
    namespace = Namespace.objects.get(name=result["namespace"])
    operator = Identity(
        namespace_id=namespace.id,
        actor_id="f" * 32,
        scopes=frozenset({Scope.RECOVER, Scope.WRITE, Scope.TASKS_WORK, Scope.READ}),
        queues=None,
    )
    return Scenarios(result["scenarios"], operator)


class Scenarios:
    """The demo's instances and an operator who decides on them."""

    def __init__(self, scenarios: dict, operator: Identity) -> None:
        self.scenarios, self.operator, self.keys = scenarios, operator, 0

    def instance(self, name: str) -> WorkflowInstance:
        return WorkflowInstance.objects.get(id=self.scenarios[name]["instance_id"])

    def step(self, name: str) -> Step:
        return Step.objects.get(instance_id=self.scenarios[name]["instance_id"], key=self.scenarios[name]["step_key"])

    def decide(self, name: str, operation: str, **fields):
        """Run one operation with the revisions read just now, as an operator would."""
        instance = self.instance(name)
        command = {
            "expected_revision": str(instance.revision),
            "reason": f"{operation} after checking the facts",
            "evidence_ref": "ticket:OPS-1",
            **fields,
        }
        self.keys += 1
        return OPERATIONS[operation].service(
            identity=self.operator, instance_id=instance.id, idempotency_key=f"e2e-{self.keys}", command=command
        )

    def step_decision(self, name: str) -> dict:
        step = self.step(name)
        return {
            "step_key": step.key,
            "activation_id": step.current_activation_id,
            "expected_step_revision": str(step.revision),
        }

    def review(self, name: str, result: dict):
        task = Task.objects.get(id=self.scenarios[name]["task_id"])
        return self.decide(
            name,
            "review-task",
            task_id=task.id,
            expected_task_revision=str(task.revision),
            execution_settled=True,
            conclusion="SUCCEEDED",
            result=result,
        )

    def approve(self, reason: str) -> None:
        """The customer's valid ``approval`` signal for the signal_rearm scenario, as a client sends it."""
        instance = self.instance("signal_rearm")
        self.keys += 1
        signal_accept(
            identity=self.operator,
            instance_id=instance.id,
            command={
                "name": "approval",
                "payload_version": "v1",
                "payload": {"approved": True},
                "correlation_key": instance.business_key,
                "target_step_key": "approve",
                "reason": reason,
            },
            idempotency_key=f"e2e-{self.keys}",
        )

    def work(self, queue: str) -> Task | None:
        """One worker claim on ``queue``, run to completion, then the background settles."""
        claim = task_claim(identity=self.operator, queue_name=queue, command={"worker": "e2e", "lease_seconds": 30})
        if claim is not None:
            claim_execute(identity=self.operator, claim=claim)
        runner_settle()
        return claim.task if claim else None


def _clean():
    assert [str(v) for v in invariants_check()] == []


def test_task_outcome_unknown_verified_succeeded_runs_to_success(demo):
    demo.review("task_unknown", {"paid": True})
    assert demo.instance("task_unknown").state == "NEEDS_REVIEW"  # ReviewTask does not lift the review
    runner_settle()  # the REVIEWED record is consumed
    demo.decide(
        "task_unknown",
        "resolve-step",
        execution_settled=True,
        conclusion="SUCCEEDED",
        result={"paid": True},
        **demo.step_decision("task_unknown"),
    )
    receipt = demo.decide("task_unknown", "continue", review_resolved=True)
    assert receipt.data["state"] == "RUNNING"
    runner_settle()
    assert demo.instance("task_unknown").state == "SUCCEEDED"
    _clean()


def test_task_confirmed_failed_is_retried_within_its_budget_by_a_worker(demo):
    first = Task.objects.get(id=demo.scenarios["task_failed_budget_left"]["task_id"])
    receipt = demo.decide(
        "task_failed_budget_left", "retry-step", safe_to_retry=True, **demo.step_decision("task_failed_budget_left")
    )
    retried = Task.objects.get(id=receipt.data["task_id"])
    assert (retried.retry_of_id, retried.max_attempts, retried.state) == (first.id, 2, "QUEUED")
    assert (retried.deadline_at, retried.input, retried.business_key) == (
        first.deadline_at,
        first.input,
        first.business_key,
    )
    assert demo.work(TASKS) is None  # the gate stays closed until Continue
    demo.decide("task_failed_budget_left", "continue", review_resolved=True)
    assert demo.work(TASKS).id == retried.id  # a worker runs the new task (demo.fail fails it again)
    retried.refresh_from_db()
    assert (retried.state, retried.attempt_count) == ("FAILED", 1)
    assert demo.instance("task_failed_budget_left").state == "NEEDS_REVIEW"
    receipt = demo.decide(
        "task_failed_budget_left", "retry-step", safe_to_retry=True, **demo.step_decision("task_failed_budget_left")
    )
    assert Task.objects.get(id=receipt.data["task_id"]).max_attempts == 1  # 3 - (1 + 1) attempts used
    demo.decide("task_failed_budget_left", "continue", review_resolved=True)
    demo.work(TASKS)
    with pytest.raises(FailedPrecondition):
        demo.decide(
            "task_failed_budget_left", "retry-step", safe_to_retry=True, **demo.step_decision("task_failed_budget_left")
        )
    _clean()


def test_poll_request_failed_is_retried_in_the_same_business_round(demo):
    receipt = demo.decide(
        "poll_request_failed", "retry-step", safe_to_retry=True, **demo.step_decision("poll_request_failed")
    )
    activation = Activation.objects.get(id=receipt.data["activation_id"])
    assert (activation.sequence, activation.first_round, activation.first_round_attempts_used) == (2, 1, 1)
    task = Task.objects.get(id=receipt.data["task_id"])
    assert (task.source_round, task.max_attempts) == (1, 1)  # 2 attempts per round, 1 used
    demo.decide("poll_request_failed", "continue", review_resolved=True)
    assert demo.work(POLLS).id == task.id
    rounds = PollRound.objects.filter(instance_id=activation.instance_id, round=1)
    assert rounds.count() == 2  # business round 1 exists under both activations
    _clean()


def test_poll_rounds_exhausted_resolved_by_hand_keeps_used_rounds(demo):
    used = Activation.objects.get(id=demo.step("poll_exhausted").current_activation_id).used_rounds
    demo.decide(
        "poll_exhausted",
        "resolve-step",
        execution_settled=True,
        conclusion="SUCCEEDED",
        result={"status": "done"},
        **demo.step_decision("poll_exhausted"),
    )
    demo.decide("poll_exhausted", "continue", review_resolved=True)
    runner_settle()
    assert demo.instance("poll_exhausted").state == "SUCCEEDED"
    assert Activation.objects.get(id=demo.step("poll_exhausted").current_activation_id).used_rounds == used
    _clean()


def test_unknown_after_cancel_settles_the_original_cancel_without_successor_work(demo):
    tasks_before = Task.objects.filter(source_instance_id=demo.scenarios["cancel_unknown"]["instance_id"]).count()
    demo.review("cancel_unknown", {"paid": False})
    runner_settle()
    demo.decide(
        "cancel_unknown",
        "resolve-step",
        execution_settled=True,
        conclusion="SUCCEEDED",
        result={"paid": False},
        **demo.step_decision("cancel_unknown"),
    )
    assert demo.decide("cancel_unknown", "continue", review_resolved=True).data["state"] == "CANCELLING"
    runner_settle()
    assert demo.instance("cancel_unknown").state == "CANCELLED"
    assert (
        Task.objects.filter(source_instance_id=demo.scenarios["cancel_unknown"]["instance_id"]).count() == tasks_before
    )
    _clean()


def test_signal_wait_rearmed_before_its_deadline_is_won_by_a_new_signal(demo):
    old = demo.step("signal_rearm")
    receipt = demo.decide("signal_rearm", "rearm-wait", wait_verified=True, **demo.step_decision("signal_rearm"))
    new = Activation.objects.get(id=receipt.data["activation_id"])
    old_activation = Activation.objects.get(id=old.current_activation_id)
    assert new.wait.generation == old_activation.wait.generation + 1
    assert new.wait.deadline_at == old_activation.wait.deadline_at
    demo.decide("signal_rearm", "continue", review_resolved=True)
    demo.approve("approved by the customer")
    runner_settle()
    assert demo.instance("signal_rearm").state == "SUCCEEDED"
    new.wait.refresh_from_db()
    assert new.wait.state == "SATISFIED" and new.wait.winner_signal.consumed_wait_id == new.wait.id
    _clean()


def test_signal_accepted_while_the_wait_is_in_review_is_taken_by_the_rearmed_wait(demo):
    demo.approve("approved by the customer while the wait was in review")
    runner_settle()
    instance = demo.instance("signal_rearm")
    record = InboxRecord.objects.get(source_id=Signal.objects.get(workflow=instance, state="PENDING").id)
    assert (record.state, record.disposition) == ("CONSUMED", "BUFFERED")
    receipt = demo.decide("signal_rearm", "rearm-wait", wait_verified=True, **demo.step_decision("signal_rearm"))
    new = Activation.objects.get(id=receipt.data["activation_id"])  # read before any runner pass
    assert (new.wait.generation, new.wait.state, new.state) == (2, "SATISFIED", "SUCCEEDED")
    winner = new.wait.winner_signal
    assert (winner.state, winner.consumed_wait_id, winner.id) == ("CONSUMED", new.wait.id, record.source_id)
    assert demo.decide("signal_rearm", "continue", review_resolved=True).data["state"] == "RUNNING"
    runner_settle()
    assert demo.instance("signal_rearm").state == "SUCCEEDED"
    _clean()


def test_poll_reviewed_pending_continues_with_the_next_round_at_the_original_interval(demo):
    demo.review("poll_pending_review", {"status": "pending"})
    runner_settle()  # the REVIEWED result classifies PENDING; the step stays in review
    step = demo.step("poll_pending_review")
    reviewed = Activation.objects.get(id=step.current_activation_id)
    assert step.state == "NEEDS_REVIEW"
    assert (reviewed.used_rounds, reviewed.last_round_classification) == (2, "PENDING")  # round 2 is counted
    demo.decide(
        "poll_pending_review", "continue-poll", pending_confirmed=True, **demo.step_decision("poll_pending_review")
    )
    demo.decide("poll_pending_review", "continue", review_resolved=True)
    activation = Activation.objects.get(id=demo.step("poll_pending_review").current_activation_id)
    assert activation.state == "WAITING" and activation.next_round_at is not None
    clock.advance(dt.timedelta(seconds=61))
    try:
        runner_settle()  # the next business round opens
        task = demo.work(POLLS)
        assert task is not None and task.source_round == 3
    finally:
        clock.advance(dt.timedelta(seconds=-61))
    assert demo.instance("poll_pending_review").state == "SUCCEEDED"
    _clean()


def test_an_expired_instance_in_review_settles_failed_after_its_step_is_resolved_and_starts_no_work(demo):
    tasks_before = Task.objects.filter(source_instance_id=demo.scenarios["expired_in_review"]["instance_id"]).count()
    with pytest.raises(FailedPrecondition):  # nothing is resolved yet
        demo.decide("expired_in_review", "continue", review_resolved=True)
    with pytest.raises(FailedPrecondition):  # past its deadline an instance starts no new work
        demo.decide("expired_in_review", "retry-step", safe_to_retry=True, **demo.step_decision("expired_in_review"))
    demo.decide(
        "expired_in_review",
        "resolve-step",
        execution_settled=True,
        conclusion="FAILED",
        result={"error": "declined"},
        **demo.step_decision("expired_in_review"),
    )
    continued = demo.decide("expired_in_review", "continue", review_resolved=True).data
    assert (continued["state"], demo.instance("expired_in_review").stop_kind) == ("CANCELLING", "FAIL")
    runner_settle()
    assert demo.instance("expired_in_review").state == "FAILED"
    tasks = Task.objects.filter(source_instance_id=demo.scenarios["expired_in_review"]["instance_id"]).count()
    assert tasks == tasks_before
    _clean()
