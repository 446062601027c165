"""Every guarded decision is certifiable on a Galera cluster: each transaction that writes also writes the rows
it locked as guards (the rule and its check: ``tests/certify.py``), across the engine's background, the
workers, signals, control and every recovery operation, proposals included. Each branch of the worker protocol
that only a race reaches in the mixed run (a lease lost before the report, a report sent twice, a candidate
claimed by another worker meanwhile) is also driven on purpose."""

import datetime as dt
import queue
import threading
from functools import partial

import pytest
from django.db import connection, transaction

from core import clock
from engine import worker
from engine.check import invariants_check
from engine.results import late_result_record, result_event_publish
from engine.runner import pass_lease_expiry
from engine.worker import task_claim_batch, task_heartbeat, task_lease_expire
from history.credentials import identity_of_credential
from history.locking import Level, LockSet
from history.models import (
    ApprovalPolicy,
    Attempt,
    InboxRecord,
    InboxSource,
    Namespace,
    ResultEvent,
    ResultKind,
    Scope,
    Task,
    TaskState,
)
from recovery.proposals import proposal_approve, proposal_reject
from testkit import requests as rq
from testkit.driver import task_step
from tests.certify import write_sets_checked
from tests.engine import test_concurrency
from tests.engine.test_concurrency import _threads
from tests.engine.test_late_evidence import PAID, _complete, _decide, _lost_lease, _review, _step_decision
from tests.recovery.digest import assert_refused

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="the check follows the MariaDB backend's commits"),
]


def test_a_writing_transaction_that_leaves_a_locked_guard_unwritten_is_caught(engine):
    instance = engine.start(engine.define([task_step("a")]))
    with write_sets_checked() as violations, transaction.atomic():
        LockSet().lock_one(Level.INSTANCE, instance.id)
        Namespace.objects.filter(pk=instance.namespace_id).update(name="renamed")
    assert len(violations) == 1 and violations[0].startswith("history_workflowinstance locked at ")


def test_a_lock_guards_the_writes_under_its_own_instance(engine):
    definition = engine.define([task_step("a")])
    written, untouched = engine.start(definition), engine.start(definition)
    with write_sets_checked() as violations:
        with transaction.atomic():
            locks = LockSet()
            rows = locks.lock(Level.INSTANCE, [written.id, untouched.id])
            rows[written.id].save()
        assert violations == []  # nothing was written under the other instance
        with transaction.atomic():
            LockSet().lock_one(Level.INSTANCE, untouched.id)
            InboxRecord.objects.create(instance=untouched, source_kind=InboxSource.SIGNAL, source_id="f" * 32)
    assert len(violations) == 1 and violations[0].startswith("history_workflowinstance locked at ")


def _lease_extended(claim):
    attempt = Attempt.objects.get(pk=claim.attempt.id)
    attempt.lease_expires_at += dt.timedelta(minutes=1)
    attempt.save(update_fields=["lease_expires_at"])


def _late_evidence(lost, running):
    locks = LockSet()
    task = locks.lock_one(Level.TASK, lost.task.id)
    late_result_record(locks=locks, task=task, attempt=lost.attempt, outcome="SUCCEEDED", result=PAID)


def _result_event(lost, running):
    locks = LockSet()
    task = locks.lock_one(Level.TASK, lost.task.id)
    result_event_publish(locks=locks, task=task, kind=ResultKind.RESULT, outcome="SUCCEEDED", result=PAID)


def _own_attempt(lost, running):
    LockSet().lock_one(Level.TASK, running.task.id)
    _lease_extended(running)


def _another_tasks_attempt(lost, running):
    LockSet().lock_one(Level.TASK, lost.task.id)
    _lease_extended(running)


# A transaction that locks a task, leaves it unwritten and writes: does what it writes stand for the task?
STANDING_FOR_THE_TASK = {
    "late evidence of its attempt": (_late_evidence, True),
    "a result event that is not late evidence": (_result_event, False),
    "its attempt's lease extended": (_own_attempt, True),
    "another task's attempt's lease extended": (_another_tasks_attempt, False),
}


@pytest.mark.parametrize("written", STANDING_FOR_THE_TASK, ids=list(STANDING_FOR_THE_TASK))
def test_a_locked_task_left_unwritten_is_caught_unless_late_evidence_or_its_attempt_was_written(engine, written):
    write, stands_for_the_task = STANDING_FOR_THE_TASK[written]
    _, lost = _lost_lease(engine)
    running = _claimed(engine)
    with write_sets_checked() as violations, transaction.atomic():
        write(lost, running)
    assert [v.split(" locked at ")[0] for v in violations] == ([] if stands_for_the_task else ["history_task"])


def test_the_background_workers_signals_and_control_write_what_they_guard(engine):
    with write_sets_checked() as violations:
        test_concurrency.test_weave_check_is_clean_after_a_mixed_concurrent_run(engine)
    assert violations == [], "\n".join(violations)


@pytest.mark.parametrize(("name", "service", "build", "make"), rq.cases(), ids=[case[0] for case in rq.cases()])
def test_a_recovery_operation_proposed_then_approved_or_rejected_writes_what_it_guards(
    tenancy, issue_token, name, service, build, make
):
    states = [make(tenancy) for _ in range(3)]
    proposer, approver = (
        identity_of_credential(issue_token(scopes=[Scope.RECOVER], actor_id=actor * 32).credential) for actor in "ab"
    )
    with write_sets_checked() as violations:
        direct = states[0]
        service(identity=proposer, instance_id=direct.instance.id, idempotency_key="direct", command=build(direct))
        ApprovalPolicy.objects.create(namespace=tenancy[0])
        for state, decide, command in (
            (states[1], proposal_approve, {}),
            (states[2], proposal_reject, {"reason": "no"}),
        ):
            proposal = service(
                identity=proposer,
                instance_id=state.instance.id,
                idempotency_key=f"p-{state.instance.id}",
                command=build(state),
            ).data["proposal_id"]
            decide(
                identity=approver,
                instance_id=state.instance.id,
                proposal_id=proposal,
                idempotency_key=f"d-{state.instance.id}",
                command=command,
            )
    assert violations == [], "\n".join(violations)


def _claimed(engine, lease_seconds=30):
    engine.start(engine.define([task_step("a")]))
    engine.settle()
    return engine.claim(lease_seconds=lease_seconds)


def _on_another_node(run):
    """Run ``run`` now, in a thread whose connection goes to another cluster node (the server itself on one)."""
    _threads(lambda: None, run)


def _claim_after_a_rival(engine, *, tasks: int, limit: int):
    """``tasks`` QUEUED tasks; the claim reads its candidates, then a rival worker takes the first of them
    before the claim locks it."""
    definition = engine.define([task_step("a")])
    for _ in range(tasks):
        engine.start(definition)
    engine.settle()
    locked_first, rivals = worker._claim_many, [engine.claim]
    with pytest.MonkeyPatch.context() as patch:

        def rival_first(candidates, **options):
            while rivals:  # once: a transaction run again (a collision on a cluster) meets no second rival
                _on_another_node(rivals.pop())
            return locked_first(candidates, **options)

        patch.setattr(worker, "_claim_many", rival_first)
        command = {"worker": "w2", "lease_seconds": 30}
        claims = task_claim_batch(identity=engine.identity, queue_name="payments", command=command, limit=limit)
    leased = Task.objects.filter(state=TaskState.LEASED).count()
    assert (len(claims), leased) == (tasks - 1, tasks)  # the rival's task was locked, found taken and left


def _heartbeat(engine, claim, lease_seconds=60):
    command = {"attempt_id": claim.attempt.id, "lease_seconds": lease_seconds}
    return task_heartbeat(identity=engine.identity, task_id=claim.task.id, command=command)


def _late_report(engine, claim):
    completion = _complete(engine, claim)
    assert completion.late and ResultEvent.objects.filter(task_id=claim.task.id, late=True).count() == 1
    return completion


def _lost_then_late(engine):
    _late_report(engine, _lost_lease(engine)[1])


def _reviewed_then_late(engine):
    instance, claim = _lost_lease(engine)
    _review(engine, instance, claim.task.id, "FAILED", {"error": "not charged"})
    engine.settle()
    assert _late_report(engine, claim).task.state == TaskState.FAILED


def _superseded_then_late(engine):
    instance, claim = _lost_lease(engine)
    _review(engine, instance, claim.task.id, "FAILED", {"error": "not charged"})
    engine.settle()
    _decide(engine, instance, "retry-step", safe_to_retry=True, **_step_decision(instance, "a"))
    assert Task.objects.filter(retry_of_id=claim.task.id).exists()
    _late_report(engine, claim)


def _reported_twice_late(engine):
    _, claim = _lost_lease(engine)
    first = _late_report(engine, claim)
    assert _complete(engine, claim, result='{"paid":false}') == first
    assert ResultEvent.objects.get(task_id=claim.task.id, late=True).result == PAID


def _finished_then_reported(engine):
    claim = _claimed(engine)
    assert not _complete(engine, claim).late
    assert_refused(lambda: _complete(engine, claim), "FAILED_PRECONDITION", field="attempt_id")
    assert_refused(lambda: _heartbeat(engine, claim), "FAILED_PRECONDITION", field="attempt_id")
    assert not task_lease_expire(attempt_id=claim.attempt.id)


def _beaten(engine):
    claim = _claimed(engine, lease_seconds=5)
    beat = _heartbeat(engine, claim)
    assert not beat.late and beat.attempt.lease_expires_at > claim.attempt.lease_expires_at
    assert Task.objects.get(pk=claim.task.id).revision == claim.task.revision  # the attempt alone is written
    clock.advance(dt.timedelta(seconds=6))
    assert not task_lease_expire(attempt_id=claim.attempt.id)  # a candidate read before the beat: found extended


def _beaten_after_the_lease_was_lost(engine):
    _, claim = _lost_lease(engine)
    assert _heartbeat(engine, claim).late


def _expired(engine):
    claim = _claimed(engine, lease_seconds=5)
    clock.advance(dt.timedelta(seconds=6))
    assert pass_lease_expiry() == 1
    assert not task_lease_expire(attempt_id=claim.attempt.id)  # expired already: nothing left to do


def _requeued(engine):
    engine.start(engine.define([task_step("a", handler="demo.fail", max_attempts=2)]), {"retryable": True})
    engine.settle()
    assert engine.work() is not None
    assert Task.objects.get().state == TaskState.QUEUED


def _completed(engine):
    claim = _claimed(engine)
    assert _complete(engine, claim).task.state == TaskState.SUCCEEDED


BRANCHES = {
    "claim": _claimed,
    "a claim whose only candidate another worker took meanwhile": partial(_claim_after_a_rival, tasks=1, limit=1),
    "a batch claim one of whose candidates another worker took meanwhile": partial(
        _claim_after_a_rival, tasks=2, limit=2
    ),
    "heartbeat, then the lease expiry of the extended lease": _beaten,
    "heartbeat after the lease was lost": _beaten_after_the_lease_was_lost,
    "lease expiry": _expired,
    "completion": _completed,
    "retryable failure requeues": _requeued,
    "late report, the task in review": _lost_then_late,
    "late report sent twice": _reported_twice_late,
    "late report on a reviewed task": _reviewed_then_late,
    "late report on a task superseded by RetryStep": _superseded_then_late,
    "report, heartbeat and lease expiry of a finished attempt": _finished_then_reported,
}


@pytest.mark.parametrize("branch", BRANCHES, ids=list(BRANCHES))
def test_each_branch_of_the_worker_protocol_writes_what_it_guards(engine, branch):
    with write_sets_checked() as violations:
        BRANCHES[branch](engine)
    assert violations == [], "\n".join(violations)
    assert invariants_check() == []


def _stream_reads_paused(nth: int, paused: threading.Event, other: queue.Queue):
    """A statement wrapper: after this transaction's ``nth`` read of the result streams, wait until the
    other node's transaction has committed (``other`` gives its GTID) and this node has applied it."""
    reads = []

    def pause(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        reading = sql.lstrip().upper().startswith("SELECT") and ResultEvent._meta.db_table in sql
        if reading and context["connection"].in_atomic_block:
            reads.append(sql)
            if len(reads) == nth:
                paused.set()
                with context["connection"].cursor() as cursor:
                    cursor.execute("SELECT WSREP_SYNC_WAIT_UPTO_GTID(%s)", [other.get(timeout=30)])
        return result

    return pause


@pytest.mark.skipif(
    not connection.settings_dict.get("NODES"), reason="on one server the task lock orders two reports of one attempt"
)
@pytest.mark.parametrize("nth", [1, 2], ids=["after the stream's position", "after looking for the first report"])
def test_two_late_reports_of_one_attempt_on_two_nodes_keep_one_event(engine, nth):
    _, claim = _lost_lease(engine)
    paused, committed, answers = threading.Event(), queue.Queue(), []

    def held_between_its_reads():
        with connection.execute_wrapper(_stream_reads_paused(nth, paused, committed)):
            answers.append(_complete(engine, claim))

    def sent_again_meanwhile():
        assert paused.wait(30)
        answers.append(_complete(engine, claim, result='{"paid":false}'))
        with connection.cursor() as cursor:
            cursor.execute("SELECT WSREP_LAST_WRITTEN_GTID()")
            committed.put(cursor.fetchone()[0])

    with write_sets_checked() as violations:
        _threads(held_between_its_reads, sent_again_meanwhile)
    assert violations == [], "\n".join(violations)
    assert [answer.late for answer in answers] == [True, True]
    # The report sent again committed first: it is the evidence.
    assert ResultEvent.objects.get(task_id=claim.task.id, late=True).result == '{"paid":false}'
    assert Task.objects.get(pk=claim.task.id).state == TaskState.NEEDS_REVIEW
    assert invariants_check() == []
