"""Every transition into review records its cause, the step it concerns and since when.

Each state is reached through the engine (``testkit.states``); the two instance-wide causes start
from rows made inconsistent on purpose, as the corruption and poison tests do.
"""

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from core.signatures import error_pattern
from engine import runner
from engine.state import instance_enter_review, instance_review_lift
from engine.worker import task_complete
from history.models import FailureSignature, Gate, InstanceState, ResultEvent, ReviewCause, Task, WorkflowInstance
from history.tenancy import namespace_ensure
from testkit import states
from testkit.driver import Engine, task_step

backfill_migration = importlib.import_module("history.migrations.0007_review_cause_backfill")
signature_backfill = importlib.import_module("history.migrations.0019_failure_signatures")

pytestmark = pytest.mark.django_db

# Invalid JSON text stored as a result: the contract check raises instead of answering.
INVALID = '{"n":1'
CONTRACT = {"type": "object", "properties": {"n": {"type": "integer"}}}


def _engine(tenancy) -> Engine:
    namespace, application, _ = tenancy
    _, _, queues = namespace_ensure(name=namespace.name, application=application.name, queues=["payments", "polls"])
    return Engine(namespace, application, queues)


def _corrupt_record(tenancy) -> WorkflowInstance:
    """The worked task moved off its step's fixed queue before the runner took its result."""
    with clock.moved(-states.BUILT_AGO):
        return _corrupted(_engine(tenancy))


def _corrupted(engine: Engine) -> WorkflowInstance:
    instance = engine.start(engine.define([task_step("a")]))
    engine.settle()
    engine.work()
    Task.objects.update(queue=engine.queues["polls"])
    engine.settle()
    return instance


def _poisoned_result(tenancy) -> WorkflowInstance:
    """A result the contract check cannot read: the inbox duty sets it aside."""
    with clock.moved(-states.BUILT_AGO):
        return _poisoned(_engine(tenancy))


def _poisoned(engine: Engine) -> WorkflowInstance:
    instance = engine.start(engine.define([task_step("a", contract=CONTRACT)]))
    engine.settle()
    engine.work()
    ResultEvent.objects.filter(task__source_instance=instance).update(result=INVALID)
    runner.runner_settle()
    return instance


def _of(build):
    return lambda tenancy: build(tenancy).instance


# cause → (how the engine got there, the step the cause names)
REACHED = {
    ReviewCause.TASK_OUTCOME_UNKNOWN: (_of(states.task_unknown_state), "charge"),
    ReviewCause.TASK_FAILED_BUDGET_LEFT: (_of(states.task_failed_state), "charge"),
    ReviewCause.TASK_BUDGET_EXHAUSTED: (_of(lambda t: states.task_failed_state(t, attempts_used=3)), "charge"),
    ReviewCause.RESULT_CONTRACT_VIOLATION: (_of(states.result_contract_violation_state), "charge"),
    ReviewCause.POLL_REQUEST_FAILED: (_of(states.poll_round_failed_state), "settle"),
    ReviewCause.POLL_UNCLASSIFIED: (_of(lambda t: states.poll_answered_state(t, answer={"status": "LOST"})), "settle"),
    ReviewCause.POLL_FAILED: (_of(lambda t: states.poll_answered_state(t, answer={"status": "REJECTED"})), "settle"),
    ReviewCause.POLL_EXHAUSTED: (_of(states.poll_rounds_exhausted_state), "settle"),
    ReviewCause.SIGNAL_CONTRACT_VIOLATION: (_of(states.signal_contract_violation_state), "approval"),
    ReviewCause.WAIT_EXPIRED: (_of(states.wait_expired_state), "approval"),
    ReviewCause.TIMER_LATE: (_of(states.timer_late_state), "cooldown"),
    ReviewCause.QUARANTINED_INPUT: (_poisoned_result, ""),
    ReviewCause.CORRUPT_INBOX_RECORD: (_corrupt_record, ""),
}
# Causes reached along more than one path: (id, cause, build, step).
ALSO = [
    ("poll deadline seen by the round pass", ReviewCause.POLL_DEADLINE_PASSED, "round", "settle"),
    ("poll deadline seen by the answer", ReviewCause.POLL_DEADLINE_PASSED, "answer", "settle"),
    ("final signal breaks the contract", ReviewCause.SIGNAL_CONTRACT_VIOLATION, None, "settle"),
]
PATHS = [(cause.value, cause, build, key) for cause, (build, key) in REACHED.items()] + [
    (
        name,
        cause,
        _of(lambda t, seen_by=seen_by: states.poll_deadline_state(t, seen_by=seen_by))
        if seen_by
        else _of(states.poll_final_signal_violation_state),
        key,
    )
    for name, cause, seen_by, key in ALSO
]


def test_every_cause_but_the_legacy_one_is_reached_by_the_engine():
    assert {cause for _, cause, _, _ in PATHS} == set(ReviewCause) - {ReviewCause.UNCLASSIFIED}


@pytest.mark.parametrize(("cause", "build", "key"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_entering_review_records_the_cause_its_step_and_since_when(tenancy, cause, build, key):
    started = clock.now()
    instance = WorkflowInstance.objects.get(pk=build(tenancy).pk)
    assert instance.state == InstanceState.NEEDS_REVIEW and instance.review_reason
    assert (instance.review_cause, instance.review_step_key) == (cause, key)
    # Built back in time: review began then, and nothing changed the instance before it.
    assert started - states.BUILT_AGO <= instance.review_since <= instance.updated_at < started


def test_an_instance_already_in_review_keeps_its_first_reason_cause_step_and_time(tenancy):
    state = states.reviewed_twice_state(tenancy)
    instance = state.instance
    assert state.steps["approval"].state == "NEEDS_REVIEW" and state.steps["charge"].state == "FAILED"
    assert (instance.review_cause, instance.review_step_key) == (ReviewCause.TASK_FAILED_BUDGET_LEFT, "charge")
    assert instance.review_reason.endswith("of step charge failed")
    assert instance.review_since < state.steps["approval"].updated_at
    states.assert_invariants(state)


def test_a_second_review_after_continue_records_its_own_cause(tenancy):
    """RetryStep and Continue lifted the first review; the retry failed too and spent the budget."""
    state = states.task_retried_state(tenancy, attempts_used=(1, 2))
    instance = state.instance
    assert (instance.review_cause, instance.review_step_key) == (ReviewCause.TASK_BUDGET_EXHAUSTED, "charge")
    assert instance.review_since > state.activations[0].updated_at
    states.assert_invariants(state)


# ---- the backfill of rows that entered review before causes were recorded -------------------


@pytest.mark.parametrize(("cause", "build", "key"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_the_backfill_reads_each_engine_reason_back_to_its_cause_and_step(tenancy, cause, build, key):
    instance = WorkflowInstance.objects.get(pk=build(tenancy).pk)
    read = backfill_migration.review_cause_of(instance.review_reason)
    failed = (ReviewCause.TASK_FAILED_BUDGET_LEFT, ReviewCause.TASK_BUDGET_EXHAUSTED, ReviewCause.POLL_REQUEST_FAILED)
    assert read == (backfill_migration.TASK_FAILED if cause in failed else cause, key or None)

    WorkflowInstance.objects.filter(pk=instance.pk).update(review_cause="", review_step_key="", review_since=None)
    backfill_migration.backfill(apps, None)
    stored = WorkflowInstance.objects.get(pk=instance.pk)
    assert (stored.review_cause, stored.review_step_key, stored.review_since) == (cause, key, instance.updated_at)


def test_the_backfill_marks_an_unknown_reason_unclassified_with_the_one_step_in_review(tenancy):
    state = states.task_unknown_state(tenancy)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(
        review_reason="lease expired", review_cause="", review_step_key="", review_since=None
    )
    untouched = states.task_failed_state(tenancy).instance
    backfill_migration.backfill(apps, None)
    stored = WorkflowInstance.objects.get(pk=state.instance.pk)
    assert (stored.review_cause, stored.review_step_key) == (ReviewCause.UNCLASSIFIED, "charge")
    assert WorkflowInstance.objects.get(pk=untouched.pk).review_since == untouched.review_since
    assert backfill_migration.review_cause_of("") == (ReviewCause.UNCLASSIFIED, None)


def test_the_backfill_leaves_instances_outside_review_blank(tenancy):
    engine = _engine(tenancy)
    running = engine.start(engine.define([task_step("a")]))
    backfill_migration.backfill(apps, None)
    stored = WorkflowInstance.objects.get(pk=running.pk)
    assert (stored.review_cause, stored.review_step_key, stored.review_since) == ("", "", None)


# ---- failure signatures ------------------------------------------------------------------------------


@pytest.mark.parametrize(("cause", "build", "key"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_entering_review_records_the_signature_of_its_reason_where_it_happened(tenancy, cause, build, key):
    with CaptureQueriesContext(connection) as statements:
        instance = WorkflowInstance.objects.get(pk=build(tenancy).pk)
    # One statement in the transaction that put it in review, an upsert: nothing read first.
    touching = [s["sql"] for s in statements.captured_queries if FailureSignature._meta.db_table in s["sql"]]
    assert len(touching) == 1 and touching[0].startswith("INSERT INTO")
    signature = FailureSignature.objects.get(pk=instance.failure_signature_id)
    assert (signature.review_cause, signature.step_key, signature.definition_id) == (cause, key, instance.definition_id)
    assert (signature.pattern, signature.sample, signature.count) == (
        error_pattern(instance.review_reason),
        instance.review_reason,
        1,
    )
    assert signature.first_seen == signature.last_seen == instance.review_since


def test_instances_failing_the_same_way_share_a_signature_and_it_leaves_with_the_review(tenancy):
    engine = _engine(tenancy)
    definition = engine.define([task_step("charge", max_attempts=1)])
    instances = [engine.start(definition) for _ in range(3)]
    engine.settle()
    for _ in instances:
        claim = engine.claim()
        command = {"attempt_id": claim.attempt.id, "outcome": "FAILED", "result": {"error": "declined"}}
        task_complete(identity=engine.identity, task_id=claim.task.id, command=command | {"retryable": False})
    engine.settle()
    stored = WorkflowInstance.objects.filter(pk__in=[i.pk for i in instances])
    assert {i.state for i in stored} == {InstanceState.NEEDS_REVIEW}
    assert len({i.failure_signature_id for i in stored}) == 1  # the reasons differ only in their task ids
    signature = FailureSignature.objects.get()
    assert signature.count == 3 and signature.first_seen <= signature.last_seen
    # Leaving review clears the instance's mark; the signature keeps its count.
    state = states.task_retried_state(tenancy, attempts_used=(1, 2))
    first = FailureSignature.objects.filter(review_cause=ReviewCause.TASK_FAILED_BUDGET_LEFT, step_key="charge")
    assert first.exclude(definition_id=definition.id).get().count == 1
    assert state.instance.failure_signature.review_cause == ReviewCause.TASK_BUDGET_EXHAUSTED


def test_the_signature_backfill_marks_the_instances_in_review_and_counts_them(tenancy):
    reviewed = [states.task_unknown_state(tenancy).instance for _ in range(2)]
    marks = {i.pk: i.failure_signature_id for i in reviewed}
    WorkflowInstance.objects.update(failure_signature=None)
    FailureSignature.objects.all().delete()
    signature_backfill.backfill(apps, None)
    assert {i.pk: i.failure_signature_id for i in WorkflowInstance.objects.filter(pk__in=marks)} == marks
    assert sum(FailureSignature.objects.values_list("count", flat=True)) == 2


def test_a_later_failure_of_an_instance_counts_as_a_knock_on_of_its_first(tenancy):
    # The task failed with budget left (the root), RetryStep and Continue ran it on, and it failed for good.
    state = states.task_retried_state(tenancy, attempts_used=(1, 2))
    instance = WorkflowInstance.objects.get(pk=state.instance.pk)
    root = FailureSignature.objects.get(pk=instance.root_signature_id)
    current = FailureSignature.objects.get(pk=instance.failure_signature_id)
    assert root.review_cause == ReviewCause.TASK_FAILED_BUDGET_LEFT and root.knock_on == 0
    assert current.review_cause == ReviewCause.TASK_BUDGET_EXHAUSTED and (current.count, current.knock_on) == (1, 1)


def test_the_same_failure_again_is_its_root_recurring_and_another_one_a_knock_on(tenancy):
    instance = states.task_unknown_state(tenancy).instance
    instance = WorkflowInstance.objects.get(pk=instance.pk)
    gate = Gate.objects.get(instance=instance)
    root = instance.root_signature_id
    assert root == instance.failure_signature_id  # its first review: the root
    again = (instance.review_reason, instance.review_cause, instance.review_step_key)
    for reason, cause, step_key in (again, ("wait for refund 7 expired", ReviewCause.WAIT_EXPIRED, "refund")):
        instance_review_lift(instance=instance, gate=gate, state=InstanceState.RUNNING, stop_kind=None, stop_reason="")
        instance_enter_review(
            instance=instance, gate=gate, reason=reason, cause=cause, now=clock.now(), step_key=step_key
        )
        assert instance.root_signature_id == root  # the root stays
    first = FailureSignature.objects.get(pk=root)
    assert (first.count, first.knock_on) == (2, 0)  # the same failure again: the root recurring
    other = FailureSignature.objects.exclude(pk=root).get()
    assert (other.review_cause, other.count, other.knock_on) == (ReviewCause.WAIT_EXPIRED, 1, 1)
