"""Inbox consumption: every result event and accepted signal, applied in order per instance.

One transaction per record. The record's sources are validated first (ownership both ways,
namespace, fixed queue); a broken relation is corruption: the record is QUARANTINED and the
instance enters review. A record for a non-current activation is only LATE_RECORDED, and so is
late evidence (a report of an attempt that lost its lease), which is written that way.
"""

import datetime as dt
from dataclasses import dataclass

from django.db.models import QuerySet

from core import clock
from engine.activation import wait_create
from engine.advance import continuation_create, instance_advance
from engine.budget import task_step_budget
from engine.definitions import contract_violation, definition_of, poll_classify
from engine.incidents import open_instance_ids
from engine.poll import NoRound, poll_next_round
from engine.quota import queue_named, quota_of
from engine.signaling import signal_spec_of, wait_satisfy, wait_winner
from engine.state import FINISHED, instance_enter_review, step_enter_review, touch
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Activation,
    ActivationState,
    Disposition,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    PollRound,
    ResultEvent,
    ResultKind,
    ReviewCause,
    Signal,
    SignalState,
    Step,
    StepKind,
    StepState,
    Task,
    WaitKind,
    WaitState,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.ownership import round_naming, task_named_back


class Corruption(Exception):
    """A record whose sources disagree about who owns what."""


@dataclass
class _Graph:
    instance: WorkflowInstance
    gate: Gate
    definition: WorkflowDefinition
    steps: dict[str, Step]  # every step of the instance, locked: a record that ends one may advance the graph
    now: dt.datetime  # one time for every row the record changes


def _review(
    graph: _Graph, step: Step, activation: Activation, *, reason: str, cause: ReviewCause, failed: bool = False
) -> None:
    step_enter_review(
        instance=graph.instance,
        gate=graph.gate,
        step=step,
        activation=activation,
        reason=reason,
        cause=cause,
        now=graph.now,
        failed=failed,
    )


def _fail(graph: _Graph, step: Step, activation: Activation, output: str, *, reason: str, cause: ReviewCause) -> None:
    """A failed answer ends the activation with it as output; the step FAILED, the instance in review."""
    activation.output = output
    activation.completed_at = graph.now
    _review(graph, step, activation, reason=reason, cause=cause, failed=True)


def _task_failed_cause(step: Step, spec: dict, task: Task) -> ReviewCause:
    """Why a failed task puts its step in review: a POLL query failed; a TASK step's chain may still be re-run
    by RetryStep's budget rule, or its budget is spent."""
    if spec["kind"] == StepKind.POLL:
        return ReviewCause.POLL_REQUEST_FAILED
    if task_step_budget(step=step, spec=spec, task=task).refusal() is None:
        return ReviewCause.TASK_FAILED_BUDGET_LEFT
    return ReviewCause.TASK_BUDGET_EXHAUSTED


def _result_sources(locks: LockSet, record: InboxRecord, graph: _Graph):
    """The event, task, activation, step and step spec of a result record, verified both ways.

    The activation (with its wait) and the task the record names are read locked, in the lock
    order, and verified after: a record that names rows it does not own is quarantined all the same.
    """
    instance, definition = graph.instance, graph.definition
    event = record.source_event  # read with the record
    if event is None or event.task_id != record.task_id:
        raise Corruption(f"result event {record.source_id} is missing or belongs to another task")
    activation = locks.lock_one(Level.ACTIVATION, record.activation_id) if record.activation_id else None
    if activation is not None and activation.wait_id:
        locks.lock_one(Level.WAIT, activation.wait_id)
    task = locks.lock_one(Level.TASK, event.task_id)
    if task is None or task.source_instance_id != instance.id or task.namespace_id != instance.namespace_id:
        raise Corruption(f"task {event.task_id} does not belong to instance {instance.id}")
    if record.activation_id != task.source_activation_id:
        raise Corruption(f"record {record.id} names activation {record.activation_id}, its task another")
    if activation is None or activation.instance_id != instance.id:
        raise Corruption(f"activation {task.source_activation_id} of task {task.id} is not under this instance")
    step = next((s for s in graph.steps.values() if s.id == activation.step_id), None)
    spec = definition.step_spec(step.key) if step else None
    if spec is None or spec["kind"] not in (StepKind.TASK, StepKind.POLL) or step.kind != spec["kind"]:
        raise Corruption(f"activation {activation.id} is not under a TASK/POLL step of this instance")
    if queue_named(task.queue_id) != (instance.namespace_id, spec["queue"]):
        raise Corruption(f"task {task.id} is not on the fixed queue {spec['queue']} of step {step.key}")
    naming = round_naming(activation_id=activation.id, task_id=task.id, source_round=task.source_round)
    rounds = spec["kind"] == StepKind.POLL and PollRound.objects.filter(naming).exists()
    if not task_named_back(
        kind=spec["kind"], activation_task_id=activation.task_id, task_id=task.id, round_names_task=rounds
    ):
        raise Corruption(f"activation {activation.id} does not own task {task.id}")
    return event, task, activation, step, spec


def _signal_sources(record: InboxRecord, graph: _Graph):
    instance, definition = graph.instance, graph.definition
    signal = record.source_signal  # read with the record
    if (
        signal is None
        or record.signal_id != signal.id
        or signal.workflow_id != instance.id
        or signal.namespace_id != instance.namespace_id
    ):
        raise Corruption(f"signal {record.source_id} does not belong to instance {instance.id}")
    spec = definition.step_spec(signal.target_step_key)
    step = graph.steps.get(signal.target_step_key)
    if signal_spec_of(spec) is None or step is None:
        raise Corruption(f"signal {signal.id} targets {signal.target_step_key}, not a signal step of the definition")
    record.signal = signal  # the record's timeline event names the signal's step without reading it again
    return signal, step, spec


def inbox_consume_next(*, instance_id: str) -> InboxRecord | None:
    """Consume the oldest PENDING record of one instance in one transaction; None when none or busy."""
    return atomic_with_retry(lambda: _consume(instance_id))


def _consume(instance_id: str) -> InboxRecord | None:
    locks = LockSet()
    instance = locks.lock_one(Level.INSTANCE, instance_id, skip_locked=True)
    if instance is None:
        if WorkflowInstance.objects.filter(pk=instance_id).exists():
            return None  # another runner holds it
        return _quarantine_orphans(locks, instance_id)
    record = _pending(instance_id).select_related("source_event", "source_signal").first()
    if record is None:
        return None
    gate = locks.lock_one(Level.GATE, instance_id)
    steps = locks.lock_steps_of(instance_id)
    try:
        definition = definition_of(instance)
    except WorkflowDefinition.DoesNotExist:
        definition = None
    now = clock.now()
    graph = _Graph(instance=instance, gate=gate, definition=definition, steps=steps, now=now)
    succeeded = {key for key, step in steps.items() if step.state == StepState.SUCCEEDED}
    try:
        if gate is None or definition is None:
            raise Corruption(f"instance {instance_id} has no gate or definition")
        if record.source_kind == InboxSource.RESULT_EVENT:
            disposition = _apply_result(locks, graph, record, *_result_sources(locks, record, graph))
        elif record.source_kind == InboxSource.SIGNAL:
            disposition = _apply_signal(locks, graph, record, *_signal_sources(record, graph))
        else:
            raise Corruption(f"record {record.id} has an unknown source kind")
    except Corruption as exc:
        locks.lock_one(Level.INBOX, record.id)
        record.state = InboxState.QUARANTINED
        record.quarantine_reason = str(exc)[:1024]
        record.consumed_at = now
        record.save()
        instance_enter_review(
            instance=instance,
            gate=gate,
            reason=f"corrupt inbox record {record.id}: {exc}",
            cause=ReviewCause.CORRUPT_INBOX_RECORD,
            now=now,
        )
        touch(instance, now)
        return record
    record.state = InboxState.CONSUMED
    record.disposition = disposition
    record.consumed_at = now
    record.save()
    ended = [key for key, step in steps.items() if step.state == StepState.SUCCEEDED and key not in succeeded]
    if ended:
        _continue(locks, graph, ended)
    touch(instance, now)
    return record


def _continue(locks: LockSet, graph: _Graph, ended: list[str]) -> None:
    """Advance the graph after the steps a record ended, in the record's transaction: the next task is
    claimable at this commit, not at a later pass's. A ready step that meets a full quota leaves a
    PENDING continuation per ended step, which the runner retries."""
    quota = quota_of(locks=locks, definition=graph.definition)
    instance, gate, definition, steps = graph.instance, graph.gate, graph.definition, graph.steps
    if not instance_advance(locks=locks, quota=quota, instance=instance, gate=gate, definition=definition, steps=steps):
        for key in ended:
            continuation_create(instance=instance, step_key=key, kind="STEP", now=graph.now)


def _quarantine_orphans(locks: LockSet, instance_id: str) -> InboxRecord | None:
    """Records naming an instance that does not exist are corruption: quarantined, never applied."""
    ids = InboxRecord.objects.filter(instance_id=instance_id, state=InboxState.PENDING).values_list("id", flat=True)
    records = locks.lock(Level.INBOX, ids)
    for record in records.values():
        record.state = InboxState.QUARANTINED
        record.quarantine_reason = f"instance {instance_id} does not exist"
        record.consumed_at = clock.now()
        record.save()
    return next(iter(records.values()), None)


def _record_lock(locks: LockSet, record: InboxRecord) -> None:
    """The record's place in the lock order; its row lock comes with its UPDATE. A record of an instance is
    updated only by this module, under the instance's lock (held since before the record was read), so no other
    transaction waits on it or changes it meanwhile: a locking read would only read it again."""
    locks.lock_by_write(Level.INBOX, record.id)


def _apply_result(
    locks: LockSet,
    graph: _Graph,
    record: InboxRecord,
    event: ResultEvent,
    task: Task,
    activation: Activation,
    step: Step,
    spec: dict,
) -> Disposition:
    _record_lock(locks, record)
    if event.late:
        # Late evidence is written already LATE_RECORDED; should its record ever be pending, it
        # is still only recorded: a report of a lost lease never changes state.
        return Disposition.LATE_RECORDED
    current = step.current_activation_id == activation.id and graph.instance.state not in FINISHED
    if event.kind == ResultKind.REVIEWED:
        if not current:
            return Disposition.LATE_RECORDED
        _apply_reviewed(activation, task, event, spec, graph.now)
        return Disposition.APPLIED
    in_flight = activation.state == ActivationState.ACTIVE and (
        spec["kind"] == StepKind.TASK or activation.last_task_id == task.id
    )
    if not current or not in_flight:
        return Disposition.LATE_RECORDED
    now = graph.now
    disposition = Disposition.APPLIED
    if event.kind == ResultKind.UNKNOWN:
        _review(
            graph,
            step,
            activation,
            reason=f"the outcome of task {task.id} of step {step.key} is unknown (lease expired)",
            cause=ReviewCause.TASK_OUTCOME_UNKNOWN,
        )
    elif event.outcome != "SUCCEEDED":
        reason = f"task {task.id} of step {step.key} failed"
        _fail(graph, step, activation, event.result, reason=reason, cause=_task_failed_cause(step, spec, task))
    elif spec["kind"] == StepKind.TASK:
        disposition = _succeed(graph, step, activation, spec, event.result, now)
    else:
        disposition = _apply_poll_answer(graph, step, activation, spec, event, now)
    touch(step, now)
    touch(activation, now)
    return disposition


def _succeed(graph: _Graph, step: Step, activation: Activation, spec: dict, output: str, now: dt.datetime):
    """Activation and step SUCCEEDED with the output, unless it breaks the step's result contract."""
    violation = contract_violation(step_spec=spec, value_text=output)
    if violation is not None:
        activation.output = output
        reason = f"the result of step {step.key} breaks its contract: {violation}"
        _review(graph, step, activation, reason=reason, cause=ReviewCause.RESULT_CONTRACT_VIOLATION)
        return Disposition.CONTRACT_VIOLATION
    activation.state = ActivationState.SUCCEEDED
    activation.output = output
    activation.completed_at = now
    step.state = StepState.SUCCEEDED
    step.output = output
    return Disposition.APPLIED


def _apply_poll_answer(
    graph: _Graph, step: Step, activation: Activation, spec: dict, event: ResultEvent, now: dt.datetime
) -> Disposition:
    """Classify a query task's successful answer by the fixed mapping (a query's success is not the business result)."""
    classification = poll_classify(step_spec=spec, result_text=event.result)
    if classification is None:
        reason = f"the answer of poll step {step.key} matches no classification"
        _review(graph, step, activation, reason=reason, cause=ReviewCause.POLL_UNCLASSIFIED)
        return Disposition.APPLIED
    activation.used_rounds += 1
    activation.last_round_classification = classification
    if classification == "SUCCEEDED":
        final = spec.get("final_signal")
        if final is None:
            return _succeed(graph, step, activation, spec, event.result, now)
        activation.output = event.result
        activation.state = ActivationState.WAITING
        step.state = StepState.WAITING
        # A final signal that came before the answer is taken here; the record's advance follows it.
        wait_create(
            instance=graph.instance,
            gate=graph.gate,
            step=step,
            activation=activation,
            kind=WaitKind.POLL_FINAL_SIGNAL,
            signal_spec=final,
            step_spec=spec,
            deadline_at=now + dt.timedelta(seconds=final["deadline_seconds"]),
            fire_at=None,
            now=now,
        )
    elif classification == "FAILED":
        reason = f"poll step {step.key} classified its answer FAILED"
        _fail(graph, step, activation, event.result, reason=reason, cause=ReviewCause.POLL_FAILED)
    else:
        next_round = poll_next_round(activation, answered_at=event.created_at)
        if next_round.refusal is not None:
            if next_round.refusal == NoRound.ROUNDS_USED:
                why, cause = "rounds exhausted", ReviewCause.POLL_EXHAUSTED
            else:
                why, cause = "poll deadline reached", ReviewCause.POLL_DEADLINE_PASSED
            _review(graph, step, activation, reason=f"poll step {step.key}: still PENDING, {why}", cause=cause)
        else:
            activation.state = ActivationState.WAITING
            activation.next_round_at = next_round.due_at
            step.state = StepState.WAITING
    return Disposition.APPLIED


def _apply_reviewed(activation: Activation, task: Task, event: ResultEvent, spec: dict, now: dt.datetime) -> None:
    """A REVIEWED event records the verified outcome; it never resolves the step or lifts the review.

    POLL: a verified SUCCEEDED answer of the activation's last round is classified by the fixed
    mapping (last_round_classification, used_rounds): a verified PENDING stays PENDING.
    """
    activation.verified_outcome = event.outcome
    activation.verified_result = event.result
    if (
        spec["kind"] == StepKind.POLL
        and event.outcome == "SUCCEEDED"
        and activation.last_task_id == task.id
        # Only the open round: an earlier round's classification is no answer for this one.
        and task.source_round == (activation.used_rounds or 0) + 1
    ):
        classification = poll_classify(step_spec=spec, result_text=event.result)
        if classification is not None:
            activation.last_round_classification = classification
            activation.used_rounds += 1
    touch(activation, now)


def _apply_signal(
    locks: LockSet, graph: _Graph, record: InboxRecord, signal: Signal, step: Step, spec: dict
) -> Disposition:
    activation = locks.lock_one(Level.ACTIVATION, step.current_activation_id) if step.current_activation_id else None
    wait = locks.lock_one(Level.WAIT, activation.wait_id) if activation and activation.wait_id else None
    _record_lock(locks, record)
    if signal.state != SignalState.PENDING:
        return Disposition.EXPIRED if signal.state == SignalState.EXPIRED else Disposition.DUPLICATE
    signal_spec = signal_spec_of(spec)
    now = graph.now
    if signal.name != signal_spec["name"] or signal.payload_version != signal_spec["payload_version"]:
        signal.state = SignalState.REJECTED
        signal.disposition = Disposition.REJECTED
        touch(signal, now)
        return Disposition.REJECTED
    if wait is None or wait.state != WaitState.WAITING or wait.kind == WaitKind.TIMER:
        return Disposition.BUFFERED
    winner = wait_winner(wait=wait, activation=activation, step=step, now=now, consuming=signal)
    if winner is None:
        return Disposition.BUFFERED
    disposition = wait_satisfy(
        instance=graph.instance,
        gate=graph.gate,
        step=step,
        activation=activation,
        wait=wait,
        signal=winner,
        step_spec=spec,
        now=now,
    )
    return disposition if winner.id == signal.id else Disposition.BUFFERED


def _pending(instance_id: str):
    return InboxRecord.objects.filter(instance_id=instance_id, state=InboxState.PENDING).order_by("created_at", "id")


def inbox_head_id(*, instance_id: str) -> str | None:
    """The id of the record ``inbox_consume_next`` takes next for this instance."""
    return _pending(instance_id).values_list("id", flat=True).first()


def records_pending(now: dt.datetime | None = None) -> QuerySet[InboxRecord]:
    """Every PENDING record, of every instance (``now`` is a runner duty's, unused: a record is due at once)."""
    return InboxRecord.objects.filter(state=InboxState.PENDING)


def instances_with_pending_records(*, limit: int = 100) -> dict[str, int]:
    """Instances that have PENDING inbox records, oldest record first, with how many of their records the scan
    saw; not those whose inbox is set aside."""
    rows = (
        records_pending()
        .exclude(instance_id__in=open_instance_ids("inbox"))
        .order_by("created_at", "id")
        .values_list("instance_id", flat=True)[: limit * 4]
    )
    seen: dict[str, int] = {}
    for instance_id in rows:
        seen[instance_id] = seen.get(instance_id, 0) + 1
    return dict(list(seen.items())[:limit])
