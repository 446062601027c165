"""Eligibility and preview: the operations' own checks run without writing, and agree with the commit."""

import pytest
from django.db.models import F

from core import clock
from core.ids import new_id
from history.models import (
    Activation,
    Attempt,
    AttemptState,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Queue,
    Step,
    Task,
    TaskState,
    WorkflowInstance,
)
from history.tenancy import namespace_ensure
from recovery.eligibility import eligibilities, instance_eligibility, operation_preview
from recovery.operations import step_retry
from testkit import requests as rq
from testkit import states
from testkit.histories import retry_chain_state
from tests.recovery.digest import assert_refused, history_digest

pytestmark = pytest.mark.django_db


def test_eligibility_offers_retry_with_its_preview_and_explains_every_refusal(tenancy, recoverer):
    state = states.task_failed_state(tenancy, attempts_used=2)
    before = history_digest()
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    assert history_digest() == before
    charge = eligibility["steps"]["charge"]
    retry = charge["retry-step"]
    assert retry["possible"] is True
    preview = retry["preview"]
    assert preview["new_activation"]["sequence"] == 2
    assert preview["attempt_budget"] == {"used": 2, "remaining": 1}
    assert preview["deadlines_kept"]["deadline_at"].endswith("Z")
    revision = state.instance.revision
    assert preview["instance"]["revision"] == {"before": str(revision), "after": str(revision + 1)}
    assert preview["instance"]["state"] == {"before": "NEEDS_REVIEW", "after": "NEEDS_REVIEW"}
    assert charge["review-task"]["possible"] is False and "NEEDS_REVIEW" in charge["review-task"]["reason"]
    assert charge["continue-poll"] == {
        "possible": False,
        "code": "FAILED_PRECONDITION",
        "reason": "ContinuePoll applies to POLL steps; 'charge' is TASK",
    }
    assert charge["rearm-wait"]["possible"] is False
    assert charge["resolve-step"]["possible"] is True
    assert eligibility["continue"]["possible"] is False
    assert "without a conclusion" in eligibility["continue"]["reason"]


def test_eligibility_offers_review_task_for_a_task_in_review(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    entry = instance_eligibility(identity=recoverer, instance_id=state.instance.id)["steps"]["charge"]
    assert entry["review-task"]["possible"] is True and entry["review-task"]["task_id"] == state.task.id
    assert entry["review-task"]["preview"]["task"]["permit_held"] == {"before": True, "after": False}
    assert entry["resolve-step"]["possible"] is False and "NEEDS_REVIEW" in entry["resolve-step"]["reason"]


def test_eligibility_of_an_instance_not_in_review_refuses_everything_with_the_reason(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    assert eligibility["continue"]["possible"] is False and "RUNNING" in eligibility["continue"]["reason"]
    assert all(not entry["possible"] for entry in eligibility["steps"]["charge"].values())


def test_continue_preview_shows_the_state_and_gate_after(tenancy, recoverer):
    state = states.task_resolved_state(tenancy)
    preview = instance_eligibility(identity=recoverer, instance_id=state.instance.id)["continue"]["preview"]
    assert preview["instance"]["state"] == {"before": "NEEDS_REVIEW", "after": "RUNNING"}
    assert preview["instance"]["gate_open"] == {"before": False, "after": True}
    assert preview["root_continuation"] == "CONTINUE"


def test_a_preview_matches_what_the_commit_does(tenancy, recoverer):
    state = states.poll_round_failed_state(tenancy)
    command = rq.retry(state)
    preview = operation_preview(
        identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command
    )
    receipt = rq.run(step_retry, recoverer, state, command)
    task = Task.objects.get(pk=receipt.data["task_id"])
    assert preview["new_task"]["max_attempts"] == task.max_attempts
    assert preview["new_activation"]["sequence"] == receipt.data["activation_sequence"]
    assert preview["new_activation"]["first_round"] == 2
    assert preview["instance"]["revision"]["after"] == receipt.data["revision"]


def test_the_commit_refuses_a_stale_preview(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state)
    operation_preview(identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=command)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(revision=21)  # a background fact arrived
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "ABORTED")


def test_a_preview_refuses_like_the_commit(tenancy, recoverer):
    state = states.task_failed_state(tenancy, stop_kind="CANCEL")
    assert_refused(
        lambda: operation_preview(
            identity=recoverer, operation="retry-step", instance_id=state.instance.id, command=rq.retry(state)
        ),
        "FAILED_PRECONDITION",
    )


def _entry(eligibility: dict, state, operation: str) -> dict:
    if operation == "continue":
        return eligibility["continue"]
    return eligibility["steps"][state.step.key][operation]


@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[c[0] for c in rq.cases()])
def test_eligibility_offers_exactly_the_operation_that_then_commits(tenancy, recoverer, name, service, build, make):
    state = make(tenancy)
    operation = next(op for op in ("rearm-wait", "retry-step", name) if name.startswith(op))
    eligibility = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
    entry = _entry(eligibility, state, operation)
    assert entry["possible"] is True, entry
    receipt = rq.run(service, recoverer, state, build(state))
    assert entry["preview"]["instance"]["revision"]["after"] == receipt.data["revision"]
    assert entry["preview"]["operation"] == receipt.data["operation"]


def test_many_instances_are_judged_together_exactly_as_each_alone(tenancy, recoverer, monkeypatch):
    # The review queue judges its page at once from shared reads; every refusal an instance-level check gives
    # (another namespace's instance, one outside review, an inbox record pending or quarantined, a missing gate)
    # and every step operation must come out as instance_eligibility gives it for that instance alone.
    made = [
        states.task_resolved_state(tenancy),
        states.task_failed_state(tenancy, attempts_used=2),
        states.task_unknown_state(tenancy),
        states.poll_round_failed_state(tenancy),
        states.signal_contract_violation_state(tenancy),
        states.timer_late_state(tenancy),
        states.task_failed_state(tenancy, stop_kind="CANCEL"),
    ]
    running, pending, quarantined, gateless = (states.task_unknown_state(tenancy) for _ in range(4))
    WorkflowInstance.objects.filter(pk=running.instance.pk).update(state=InstanceState.RUNNING)
    for state, inbox_state in ((pending, InboxState.PENDING), (quarantined, InboxState.QUARANTINED)):
        InboxRecord.objects.create(
            instance=state.instance, source_kind=InboxSource.SIGNAL, source_id=new_id(), state=inbox_state
        )
    Gate.objects.filter(pk=gateless.instance.pk).delete()
    made += [running, pending, quarantined, gateless]
    frozen = clock.now()  # the previews name times: both judgements read the same now
    monkeypatch.setattr(clock, "now", lambda: frozen)
    ids = [state.instance.id for state in made]
    instances = list(WorkflowInstance.objects.filter(pk__in=ids))
    judged = eligibilities(identity=recoverer, instances=instances)
    assert set(judged) == set(ids)
    for instance_id in ids:
        alone = instance_eligibility(identity=recoverer, instance_id=instance_id)
        assert judged[instance_id].eligibility == alone
        steps = {step.key: step for step in Step.objects.filter(instance_id=instance_id)}
        assert {key: step.revision for key, step in judged[instance_id].steps.items()} == {
            key: step.revision for key, step in steps.items()
        }
        in_review = Task.objects.filter(source_instance_id=instance_id, state=TaskState.NEEDS_REVIEW)
        assert set(judged[instance_id].review_tasks) == {task.id for task in in_review}
    refusals = {judged[s.instance.id].eligibility["continue"].get("reason") for s in (pending, quarantined, gateless)}
    assert refusals == {
        "the inbox holds unconsumed records: let the runner consume them first",
        "the inbox holds a QUARANTINED record: corruption no declaration can release",
        "the instance has no gate",
    }


def _other_queue(task: Task) -> None:
    queue = Queue.objects.create(namespace_id=task.namespace_id, name=f"ledger-{task.pk[-8:]}")
    Task.objects.filter(pk=task.pk).update(queue=queue)


# What can be wrong with a task a step's first or current activation names, each judged by a check the page reads
# for all its rows at once: which tasks are settled, owned and placed, and their attempt rows.
FRONTIER_TROUBLES = {
    "permit held": lambda task: Task.objects.filter(pk=task.pk).update(permit_held=True),
    "attempt running": lambda task: Attempt.objects.filter(task_id=task.pk).update(state=AttemptState.RUNNING),
    "leased": lambda task: Task.objects.filter(pk=task.pk).update(state=TaskState.LEASED),
    "on another queue": _other_queue,
    "attempts miscounted": lambda task: Task.objects.filter(pk=task.pk).update(attempt_count=F("attempt_count") + 1),
}
TROUBLE_REASONS = {
    "permit held": "still holds its quota permit",
    "attempt running": "has a RUNNING attempt",
    "leased": "is LEASED: review it or let it finish first",
    "on another queue": "is not on the step's fixed queue",
    "attempts miscounted": "attempts but has other attempt rows",
}


def test_troubled_chain_ends_are_judged_together_exactly_as_each_alone(tenancy, recoverer, monkeypatch):
    # A counted step (one activation, its counters agreeing) is judged from its frontier, which the page reads for
    # all rows at once; a history built without counters is verified whole. Both come out as each alone.
    # Built first: building runs the engine's passes, which would settle an attempt made RUNNING.
    built = {}
    for name in FRONTIER_TROUBLES:
        built[name, "counted"] = states.task_failed_state(tenancy, attempts_used=2)
        built[name, "verified"] = retry_chain_state(tenancy, 3)
    sound = states.task_failed_state(tenancy, attempts_used=2)
    for (name, kind), state in built.items():
        FRONTIER_TROUBLES[name](state.task if kind == "counted" else state.tasks[-1])
    judged = _together_as_alone(recoverer, monkeypatch, {**built, "sound": sound})
    for key, state in built.items():
        task = state.task if key[1] == "counted" else state.tasks[-1]
        reason = judged[key]["steps"]["charge"]["retry-step"]["reason"]
        assert reason.startswith(f"task {task.id} ") and reason.endswith(TROUBLE_REASONS[key[0]]), (key, reason)
    assert judged["sound"]["steps"]["charge"]["retry-step"]["possible"] is True


def _together_as_alone(recoverer, monkeypatch, built: dict) -> dict:
    """Each state's instance judged together with the others, asserted equal to it judged alone, by key."""
    frozen = clock.now()  # the previews name times: both judgements read the same now
    monkeypatch.setattr(clock, "now", lambda: frozen)
    ids = [state.instance.id for state in built.values()]
    judged = eligibilities(identity=recoverer, instances=list(WorkflowInstance.objects.filter(pk__in=ids)))
    for key, state in built.items():
        alone = instance_eligibility(identity=recoverer, instance_id=state.instance.id)
        assert judged[state.instance.id].eligibility == alone, key
    return {key: judged[state.instance.id].eligibility for key, state in built.items()}


def _elsewhere(task: Task) -> None:
    other = namespace_ensure(name="elsewhere", application="app", queues=["payments"])[0]
    Task.objects.filter(pk=task.pk).update(namespace_id=other.id)


# What can be wrong with a task in review, each judged by ReviewTask from rows the page reads for all its rows at once.
REVIEW_TROUBLES = {
    "attempt running": (
        lambda task: Attempt.objects.filter(task_id=task.pk).update(state=AttemptState.RUNNING),
        "has a RUNNING attempt: its execution has not ended",
    ),
    "of another namespace": (_elsewhere, "in this instance"),
    "sourced in another instance": (
        lambda task: Activation.objects.filter(pk=task.source_activation_id).update(instance_id=new_id()),
        "names a source activation that is not in this instance",
    ),
}


def test_tasks_in_review_are_judged_together_exactly_as_each_alone(tenancy, recoverer, monkeypatch):
    # Built first: building runs the engine's passes, which would settle an attempt made RUNNING.
    built = {name: states.task_unknown_state(tenancy) for name in REVIEW_TROUBLES}
    sound = states.task_unknown_state(tenancy)
    for name, (trouble, _) in REVIEW_TROUBLES.items():
        trouble(built[name].task)
    judged = _together_as_alone(recoverer, monkeypatch, {**built, "sound": sound})
    for name, state in built.items():
        reason = judged[name]["steps"]["charge"]["review-task"]["reason"]
        assert state.task.id in reason and reason.endswith(REVIEW_TROUBLES[name][1]), (name, reason)
    assert judged["sound"]["steps"]["charge"]["review-task"]["possible"] is True


def test_an_instance_of_another_namespace_is_judged_not_found_among_the_others(tenancy, recoverer):
    mine = states.task_unknown_state(tenancy)
    theirs = states.task_unknown_state(namespace_ensure(name="other", application="app", queues=["payments"]))
    judged = eligibilities(identity=recoverer, instances=[mine.instance, theirs.instance])
    assert judged[mine.instance.id].eligibility["steps"]["charge"]["review-task"]["possible"] is True
    refused = judged[theirs.instance.id].eligibility["continue"]
    assert refused["possible"] is False and refused["code"] == "NOT_FOUND"
