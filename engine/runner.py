"""The runner: one pass of every background duty, each item in its own transaction.

Candidates are found with plain reads; each item is then re-checked under row locks taken in
the fixed order. Instances another runner holds are skipped (SKIP LOCKED) and picked up by a
later pass, so several runners can work side by side. An item that fails with anything but a
database error is set aside as an incident (``engine.incidents``) and left out of the pass's
candidates while the incident is open; every other item goes on.
"""

import datetime as dt
import logging
import random
import weakref
from collections.abc import Callable, Collection, Iterable

from django import db
from django.db.models import Exists, OuterRef, QuerySet

from core import clock, exactjson
from core.ids import new_id
from core.logs import log_context
from core.metrics import RUNNER_ITEMS, RUNNER_PASS_SECONDS
from engine.activation import poll_round_start
from engine.advance import continuation_create, continuations_apply, instance_lock_graph
from engine.definitions import definition_of
from engine.inbox import inbox_consume_next, inbox_head_id, instances_with_pending_records, records_pending
from engine.incidents import Item, error_class_of, isolated, open_item_ids
from engine.poll import poll_deadline_passed
from engine.quota import quota_of_task
from engine.results import result_event_publish
from engine.state import gate_sync, step_enter_review, touch
from engine.stop import instance_stop_settle
from engine.watchdog import pass_watchdog
from engine.worker import task_lease_expire
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Continuation,
    ContinuationState,
    Disposition,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Proposal,
    ProposalState,
    ResultKind,
    ReviewCause,
    Signal,
    SignalState,
    StepKind,
    StepState,
    StopKind,
    Task,
    TaskState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowInstance,
)
from history.prepared import compile_once
from history.proposals import ENGINE_ACTOR, proposal_close

BATCH = 100
log = logging.getLogger("weave.background")


def _each(duty: str, kind: str, rows: Iterable[tuple[str, str | None]], work: Callable[[str, str], int]) -> int:
    """Run ``work(item id, instance id)`` for each candidate, each isolated: a poisoned item counts 0."""
    return sum(
        isolated(Item(duty, kind, item_id, instance_id), lambda i=item_id, n=instance_id: work(i, n)) or 0
        for item_id, instance_id in list(rows)
    )


def _leases_lapsed(now: dt.datetime) -> QuerySet:
    return Attempt.objects.filter(state=AttemptState.RUNNING, lease_expires_at__lt=now)


def pass_lease_expiry() -> int:
    """RUNNING attempts whose lease passed → UNKNOWN (task NEEDS_REVIEW, UNKNOWN event)."""
    rows = (
        _leases_lapsed(clock.now())
        .exclude(id__in=open_item_ids("lease_expiry"))
        .values_list("id", "task__source_instance_id")[:BATCH]
    )
    return _each("lease_expiry", "attempt", rows, lambda a, i: task_lease_expire(attempt_id=a))


def _task_deadline(task_id: str) -> bool:
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        return False
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, task.source_instance_id, skip_locked=True)
    if instance is None:
        return False
    task = locks.lock_one(Level.TASK, task_id)
    now = clock.now()
    late = (task.deadline_at and task.deadline_at <= now) or (task.latest_start_at and task.latest_start_at <= now)
    if task.state != TaskState.QUEUED or not late:
        return False
    result = exactjson.dumps({"error": "deadline_exceeded", "message": "the task did not start before its deadline"})
    task.state = TaskState.FAILED
    task.outcome = TaskState.FAILED
    task.result = result
    quota_of_task(locks=locks, task=task).release(task)
    touch(task, now)
    touch(instance, now)
    result_event_publish(locks=locks, task=task, kind=ResultKind.RESULT, outcome=TaskState.FAILED, result=result)
    return True


def _tasks_late(now: dt.datetime) -> tuple[QuerySet, QuerySet]:
    """The QUEUED tasks past their deadline, and those past their latest start: one index range each."""
    queued = Task.objects.filter(state=TaskState.QUEUED)
    return queued.filter(deadline_at__lte=now), queued.filter(latest_start_at__lte=now)


def pass_task_deadlines() -> int:
    """QUEUED tasks past their deadline or latest start → FAILED (permit released, FAILED result event)."""
    rows: dict[str, str] = {}
    for late in _tasks_late(clock.now()):
        rows |= late.exclude(id__in=open_item_ids("task_deadlines")).values_list("id", "source_instance_id")[:BATCH]
    return _each(
        "task_deadlines", "task", list(rows.items())[:BATCH], lambda t, i: atomic_with_retry(lambda: _task_deadline(t))
    )


def _instance_deadline(instance_id: str) -> bool:
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None or instance.state != InstanceState.RUNNING or instance.deadline_at > clock.now():
        return False
    gate = locks.lock_one(Level.GATE, instance_id)
    instance.stop_kind = StopKind.FAIL
    instance.stop_reason = "the instance deadline passed"
    instance.state = InstanceState.CANCELLING
    gate_sync(gate=gate, instance=instance)
    touch(instance, clock.now())
    return True


def _instances_due(now: dt.datetime) -> QuerySet:
    """The instances late and stopping: one range of ``runner_due_at``, whatever the history."""
    return WorkflowInstance.objects.filter(runner_due_at__lte=now)


def _instances_late(now: dt.datetime) -> QuerySet:
    return _instances_due(now).filter(state=InstanceState.RUNNING)


def pass_instance_deadlines() -> int:
    """RUNNING instances past their deadline → stop_kind FAIL, CANCELLING. In review: nothing is recorded."""
    rows = (
        _instances_late(clock.now()).exclude(id__in=open_item_ids("instance_deadlines")).values_list("id", "id")[:BATCH]
    )
    return _each("instance_deadlines", "instance", rows, lambda i, _: atomic_with_retry(lambda: _instance_deadline(i)))


def _with_wait(instance_id: str, wait_id: str, apply: Callable) -> bool:
    """Lock instance → gate → step → activation → wait of one wait and apply a transition to them."""
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        return False
    gate = locks.lock_one(Level.GATE, instance_id)
    wait = Wait.objects.filter(pk=wait_id).first()
    step = locks.lock_one(Level.STEP, wait.step_id)
    activation = locks.lock_one(Level.ACTIVATION, wait.activation_id)
    wait = locks.lock_one(Level.WAIT, wait_id)
    if wait.state != WaitState.WAITING or step.current_activation_id != activation.id:
        return False
    definition = definition_of(instance)
    now = clock.now()
    if not apply(instance, gate, step, activation, wait, definition.step_spec(step.key), now):
        return False
    for row in (step, activation, wait):
        touch(row, now)
    touch(instance, now)
    return True


def _wait_review(instance, gate, step, activation, wait, now, reason: str, cause: ReviewCause) -> None:
    wait.state = WaitState.NEEDS_REVIEW if wait.kind == WaitKind.TIMER else WaitState.EXPIRED
    step_enter_review(
        instance=instance, gate=gate, step=step, activation=activation, reason=reason, cause=cause, now=now
    )


def _fire_timer(instance, gate, step, activation, wait, spec, now) -> bool:
    late = now > wait.fire_at + dt.timedelta(seconds=spec["max_lateness_seconds"])
    # A re-armed generation was verified by an operator: it fires without the lateness check.
    if late and wait.generation == 1:
        reason = f"timer {step.key} was first seen too late to fire"
        _wait_review(instance, gate, step, activation, wait, now, reason, ReviewCause.TIMER_LATE)
        return True
    wait.state = WaitState.SATISFIED
    activation.state = ActivationState.SUCCEEDED
    activation.output = "null"
    activation.completed_at = now
    step.state = StepState.SUCCEEDED
    step.output = "null"
    continuation_create(instance=instance, step_key=step.key, kind="STEP")
    return True


def _timers_due(now: dt.datetime) -> QuerySet:
    return Wait.objects.filter(state=WaitState.WAITING, kind=WaitKind.TIMER, fire_at__lte=now)


def pass_timers() -> int:
    """Due TIMER waits fire (step SUCCEEDED, output null) unless first seen later than max_lateness."""
    rows = _timers_due(clock.now()).exclude(id__in=open_item_ids("timers")).values_list("id", "instance_id")[:BATCH]
    return _each("timers", "wait", rows, lambda w, i: atomic_with_retry(lambda: _with_wait(i, w, _fire_timer)))


def _expire_wait(instance, gate, step, activation, wait, spec, now) -> bool:
    if wait.deadline_at > now:
        return False
    reason = f"the wait of step {step.key} passed its deadline"
    _wait_review(instance, gate, step, activation, wait, now, reason, ReviewCause.WAIT_EXPIRED)
    return True


def _waits_late(now: dt.datetime) -> QuerySet:
    return Wait.objects.filter(
        state=WaitState.WAITING, kind__in=(WaitKind.SIGNAL, WaitKind.POLL_FINAL_SIGNAL), deadline_at__lt=now
    )


def pass_wait_deadlines() -> int:
    """WAITING signal waits past their deadline → wait EXPIRED, activation, step and instance NEEDS_REVIEW."""
    rows = (
        _waits_late(clock.now())
        .exclude(id__in=open_item_ids("wait_deadlines"))
        .values_list("id", "instance_id")[:BATCH]
    )
    return _each("wait_deadlines", "wait", rows, lambda w, i: atomic_with_retry(lambda: _with_wait(i, w, _expire_wait)))


def _expire_signal(instance_id: str, signal_id: str) -> bool:
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        return False
    signal = Signal.objects.get(pk=signal_id)
    now = clock.now()
    if signal.state != SignalState.PENDING or signal.expires_at > now:
        return False
    signal.state = SignalState.EXPIRED
    signal.disposition = Disposition.EXPIRED
    touch(signal, now)
    touch(instance, now)
    return True


def _signals_lapsed(now: dt.datetime) -> QuerySet:
    consumed = InboxRecord.objects.filter(
        source_kind=InboxSource.SIGNAL, source_id=OuterRef("id"), state=InboxState.CONSUMED
    )
    return Signal.objects.filter(state=SignalState.PENDING, expires_at__lte=now).filter(Exists(consumed))


def pass_signal_expiry() -> int:
    """PENDING signals past expires_at (their record already consumed) → EXPIRED."""
    rows = (
        _signals_lapsed(clock.now())
        .exclude(id__in=open_item_ids("signal_expiry"))
        .values_list("id", "workflow_id")[:BATCH]
    )
    return _each("signal_expiry", "signal", rows, lambda s, i: atomic_with_retry(lambda: _expire_signal(i, s)))


def _expire_proposal(proposal_id: str, instance_id: str) -> bool:
    locks = LockSet()
    proposal = locks.lock_one(Level.PROPOSAL, proposal_id, skip_locked=True)
    if proposal is None or proposal.state != ProposalState.PENDING or proposal.expires_at > clock.now():
        return False
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        return False
    proposal_close(proposal=proposal, instance=instance, state=ProposalState.EXPIRED, actor_id=ENGINE_ACTOR)
    return True


def _proposals_lapsed(now: dt.datetime) -> QuerySet:
    return Proposal.objects.filter(state=ProposalState.PENDING, expires_at__lte=now)


def pass_proposal_expiry() -> int:
    """PENDING recovery proposals past expires_at → EXPIRED: audited, nothing else changes."""
    rows = (
        _proposals_lapsed(clock.now())
        .exclude(id__in=open_item_ids("proposal_expiry"))
        .values_list("id", "workflow_id")[:BATCH]
    )
    return _each("proposal_expiry", "proposal", rows, lambda p, i: atomic_with_retry(lambda: _expire_proposal(p, i)))


def _poll_round(instance_id: str, activation_id: str) -> bool:
    locks = LockSet()
    graph = instance_lock_graph(locks=locks, instance_id=instance_id, skip_locked=True)
    if graph is None:
        return False
    instance, gate, definition, quota, steps = graph
    activation = locks.lock_one(Level.ACTIVATION, activation_id)
    step = next((s for s in steps.values() if s.id == activation.step_id), None)
    now = clock.now()
    if (
        instance.state != InstanceState.RUNNING
        or step is None
        or step.current_activation_id != activation.id
        or activation.state != ActivationState.WAITING
        or activation.wait_id is not None
        or activation.next_round_at is None
        or activation.next_round_at > now
    ):
        return False
    if poll_deadline_passed(activation, now):
        reason = f"poll step {step.key} passed its poll deadline"
        step_enter_review(
            instance=instance,
            gate=gate,
            step=step,
            activation=activation,
            reason=reason,
            cause=ReviewCause.POLL_DEADLINE_PASSED,
            now=now,
        )
    elif (
        poll_round_start(
            locks=locks, quota=quota, instance=instance, activation=activation, spec=definition.step_spec(step.key)
        )
        is None
    ):
        return False  # quota full: the round stays due and the next pass retries it
    else:
        step.state = StepState.ACTIVE
    touch(activation, now)
    touch(step, now)
    touch(instance, now)
    return True


def _rounds_due(now: dt.datetime) -> QuerySet:
    return Activation.objects.filter(
        state=ActivationState.WAITING, next_round_at__lte=now, wait__isnull=True, step__kind=StepKind.POLL
    ).filter(instance__state=InstanceState.RUNNING)


def pass_poll_rounds() -> int:
    """POLL activations whose next round is due open it (a query task per round) on RUNNING instances."""
    rows = (
        _rounds_due(clock.now()).exclude(id__in=open_item_ids("poll_rounds")).values_list("id", "instance_id")[:BATCH]
    )
    return _each("poll_rounds", "activation", rows, lambda a, i: atomic_with_retry(lambda: _poll_round(i, a)))


def _own_order(items: list) -> list:
    """Runners side by side read the same candidates; each works through them in an order of its own,
    so they seldom reach for one instance together (one instance's records still go in order)."""
    random.shuffle(items)
    return items


def pass_inbox() -> int:
    """Consume PENDING inbox records, oldest first per instance, one record per transaction.

    A record that fails is set aside with its instance's later records behind it: they are
    consumed in order or not at all.
    """
    consumed = 0
    for instance_id, seen in _own_order(list(instances_with_pending_records(limit=BATCH).items())):
        item = Item("inbox", "inbox_record", lambda i=instance_id: inbox_head_id(instance_id=i), instance_id)
        # As many records as the scan saw: asking for one more would cost a transaction that finds
        # none; a record that arrived since is the next pass's.
        for _ in range(seen):
            if isolated(item, lambda i=instance_id: inbox_consume_next(instance_id=i)) is None:
                break
            consumed += 1
    return consumed


def _continuations_pending(now: dt.datetime) -> QuerySet:
    return Continuation.objects.filter(state=ContinuationState.PENDING)


def pass_continuations() -> int:
    """Apply PENDING continuations: advance the graph (activate ready steps, finish the instance)."""
    ids = (
        _continuations_pending(clock.now())
        .exclude(instance_id__in=open_item_ids("continuations"))
        .values_list("instance_id", flat=True)
    )
    rows = ((i, i) for i in _own_order(list(dict.fromkeys(ids[: BATCH * 4]))))
    return _each("continuations", "instance", rows, lambda i, _: continuations_apply(instance_id=i))


def _instances_stopping(now: dt.datetime) -> QuerySet:
    return _instances_due(now).filter(state=InstanceState.CANCELLING)


def pass_stop_settlement() -> int:
    """Settle CANCELLING instances: cancel queued work, wait for running work, then CANCELLED / FAILED."""
    rows = (
        _instances_stopping(clock.now())
        .exclude(id__in=open_item_ids("stop_settlement"))
        .values_list("id", "id")[:BATCH]
    )
    return _each("stop_settlement", "instance", rows, lambda i, _: instance_stop_settle(instance_id=i))


PASSES: dict[str, Callable[[], int]] = {
    "lease_expiry": pass_lease_expiry,
    "task_deadlines": pass_task_deadlines,
    "instance_deadlines": pass_instance_deadlines,
    "timers": pass_timers,
    "wait_deadlines": pass_wait_deadlines,
    "signal_expiry": pass_signal_expiry,
    "proposal_expiry": pass_proposal_expiry,
    "inbox": pass_inbox,
    "poll_rounds": pass_poll_rounds,
    "continuations": pass_continuations,
    "stop_settlement": pass_stop_settlement,
    "watchdog": pass_watchdog,
}


# The rows each duty looks for, before its items with an open incident are left out (one queryset, or several
# of which any may hold one): one statement asks them all whether they have any (``duties_due``), so an idle
# pass costs one read, not one per duty. A duty without an entry always runs.
DUE: dict[str, Callable[[dt.datetime], QuerySet | tuple[QuerySet, ...]]] = {
    "lease_expiry": _leases_lapsed,
    "task_deadlines": _tasks_late,
    "instance_deadlines": _instances_late,
    "timers": _timers_due,
    "wait_deadlines": _waits_late,
    "signal_expiry": _signals_lapsed,
    "proposal_expiry": _proposals_lapsed,
    "inbox": records_pending,
    "poll_rounds": _rounds_due,
    "continuations": _continuations_pending,
    "stop_settlement": _instances_stopping,
}


def duties_due(names: Iterable[str]) -> set[str]:
    """Those of ``names`` (duties with a ``DUE`` entry) whose rows are not all absent, read in one statement
    compiled once per connection and set of duties (its only value is the time)."""
    names = tuple(names)
    if not names:
        return set()
    probes = _PROBES.setdefault(db.connections[db.connection.alias], {})
    if names not in probes:
        name = f"the probe of {', '.join(names)}"
        # A duty may look for its rows without the time (a campaign's next batch is due whatever the clock says).
        probes[names], _ = compile_once(name, (dt.datetime,), lambda v: _probe(names, *v), all_used=False)
    probe = probes[names]
    with db.connection.cursor() as cursor:
        cursor.execute(probe.sql, probe.params([clock.now()]))
        flags = cursor.fetchone()
    return {name for name, flag in zip(names, flags, strict=True) if flag}


# Per connection (a thread's own): the probe's compiled statement per set of duties.
_PROBES: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _probe(names: tuple[str, ...], now: dt.datetime) -> tuple[str, list, None]:
    tests, params = [], []
    for name in names:
        found = DUE[name](now)
        exists = []
        for rows in found if isinstance(found, tuple) else (found,):
            sql, more = rows.values("pk")[:1].query.sql_with_params()
            exists.append(f"EXISTS({sql})")
            params += more
        tests.append("(" + " OR ".join(exists) + ")")
    return "SELECT " + ", ".join(tests), params, None


def runner_pass(*, skip: Collection[str] = ()) -> dict[str, int]:
    """One pass of every duty but those in ``skip``, in a fixed order; returns how many items each duty handled.

    A duty whose rows ``duties_due`` finds absent is not run (it would handle nothing); the answer is read
    before the first such duty and read again after any duty that handled something (it may have made work for
    the ones after it). Items are isolated inside each pass; a non-database error outside any item (a pass's
    own candidate query) is logged and that pass counts 0, so the other duties still run. Every line logged
    during the pass carries its own ``pass_id``.
    """
    counts = dict.fromkeys(PASSES, 0)
    due: set[str] | None = None  # None: to be read before the next duty that has a DUE entry
    with log_context(pass_id=new_id()):
        for place, (name, run) in enumerate(PASSES.items()):
            if name in skip:
                continue
            if name in DUE:
                if due is None:
                    due = duties_due(n for n in list(PASSES)[place:] if n in DUE and n not in skip)
                if name not in due:
                    RUNNER_PASS_SECONDS.labels(name).observe(0)  # its pass was over when the probe found nothing
                    continue
            try:
                with RUNNER_PASS_SECONDS.labels(name).time():
                    counts[name] = run()
            except db.Error:
                raise
            except Exception as error:
                log.error("%s: the pass failed with %s; the other passes go on", name, error_class_of(error))
                counts[name] = 0
            RUNNER_ITEMS.labels(name).inc(counts[name])
            if counts[name]:
                due = None
        if busy := {name: count for name, count in counts.items() if count}:
            log.info("runner pass: %s", " ".join(f"{name}={count}" for name, count in busy.items()))
    return counts


# Duties whose findings are measured in minutes (the watchdog's stalls) and that read much to find them: a
# long-running runner gives each at most one pass per this many seconds of the clock, not every pass.
PACED_SECONDS = {"watchdog": 10.0}


class Pace:
    """A long-running runner's paced duties: ``resting()`` names those to skip this pass (run too recently)."""

    def __init__(self) -> None:
        self.last: dict[str, dt.datetime] = {}

    def resting(self) -> set[str]:
        now = clock.now()
        resting = {name for name, at in self.last.items() if (now - at).total_seconds() < PACED_SECONDS[name]}
        self.last.update({name: now for name in PACED_SECONDS.keys() - resting})
        return resting


def runner_settle(*, max_passes: int = 20) -> int:
    """Run passes until one handles nothing (or ``max_passes``); returns the number of passes run."""
    for number in range(1, max_passes + 1):
        if not any(runner_pass().values()):
            return number
    return max_passes
