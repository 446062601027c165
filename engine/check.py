"""The invariant checker behind ``weave_check``: broken relations, quota drift, revision order.

Reads only. Each check walks its table in keyset batches (or lets SQL keep only the violating
rows) and looks up by id just what a batch refers to, so memory stays bounded by the batch size
whatever the table sizes; the query count grows with the number of batches.
"""

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Case, Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Subquery, Sum, When
from django.db.models.functions import Coalesce

from history.models import (
    TERMINAL_TASK_STATES,
    Activation,
    Application,
    Attempt,
    AttemptState,
    Disposition,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceEvent,
    InstanceState,
    PollRound,
    Queue,
    ResultEvent,
    ResultKind,
    Signal,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.ownership import task_named_back


@dataclass(frozen=True)
class Violation:
    code: str
    message: str
    ids: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.code}: {self.message} [{', '.join(self.ids)}]"


BATCH = 2000


def _batches(queryset: QuerySet, key: str, *fields: str) -> Iterator[list[tuple]]:
    """``(key, *fields)`` rows of ``queryset`` in keyset batches ordered by ``key``: memory stays bounded by
    the batch whatever the table size (``key`` unique in the rows, e.g. the primary key or a distinct value)."""
    last = None
    while True:
        page = queryset if last is None else queryset.filter(**{f"{key}__gt": last})
        rows = list(page.order_by(key).values_list(key, *fields)[:BATCH])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _by_id(model, ids, *fields: str) -> dict:
    """The rows of ``model`` with these ids: id → the tuple of ``fields`` (one field: its value)."""
    ids = {i for i in ids if i is not None}
    rows = model.objects.filter(pk__in=ids).values_list("pk", *fields) if ids else []
    return {row[0]: (row[1] if len(fields) == 1 else row[1:]) for row in rows}


def _ownership() -> Iterator[Violation]:
    for batch in _batches(Step.objects.all(), "id", "instance_id", "key", "current_activation_id"):
        instances = _by_id(WorkflowInstance, (row[1] for row in batch), "namespace_id")
        activation_step = _by_id(Activation, (row[3] for row in batch), "step_id")
        for step_id, instance_id, key, current in batch:
            if instance_id not in instances:
                yield Violation("step_orphan", f"step {key} names a missing instance", (step_id, instance_id))
            if current is not None and activation_step.get(current) != step_id:
                yield Violation(
                    "step_current_activation", "current activation is not one of the step's", (step_id, current)
                )
    for batch in _batches(PollRound.objects.all(), "id", "activation_id", "task_id"):
        task_source = _by_id(Task, (row[2] for row in batch), "source_activation_id")
        for _, activation_id, task_id in batch:
            if task_source.get(task_id) != activation_id:
                yield Violation("poll_round_task", "poll round's task is sourced by another activation", (task_id,))
    for batch in _batches(Activation.objects.all(), "id", "step_id", "instance_id", "task_id"):
        steps = _by_id(Step, (row[1] for row in batch), "instance_id")
        task_source = _by_id(Task, (row[3] for row in batch), "source_activation_id")
        for activation_id, step_id, instance_id, task_id in batch:
            if steps.get(step_id) != instance_id:
                yield Violation("activation_step", "activation and its step disagree on the instance", (activation_id,))
            if task_id is not None and task_source.get(task_id) != activation_id:
                yield Violation(
                    "activation_task", "activation.task_id is not a task sourced by it", (activation_id, task_id)
                )
    queue_names = dict(Queue.objects.values_list("id", "name"))
    fields = ("namespace_id", "queue_id", "source_instance_id", "source_activation_id", "source_round")
    for batch in _batches(Task.objects.all(), "id", *fields):
        yield from _task_ownership(batch, queue_names)


_NOT_NAMED = {
    StepKind.TASK: ("task_activation", "TASK activation does not name this task"),
    StepKind.POLL: ("task_poll_round", "query task has no poll round under its activation"),
}


def _task_ownership(batch: list[tuple], queue_names: dict) -> Iterator[Violation]:
    instances = _by_id(WorkflowInstance, (row[3] for row in batch), "namespace_id", "definition_id")
    activations = _by_id(Activation, (row[4] for row in batch), "step_id", "instance_id", "task_id")
    steps = _by_id(Step, (a[0] for a in activations.values()), "key", "kind")
    definitions = {d.id: d for d in WorkflowDefinition.objects.filter(pk__in={i[1] for i in instances.values()})}
    rounds = set(
        PollRound.objects.filter(task_id__in=[row[0] for row in batch]).values_list("activation_id", "task_id", "round")
    )
    for task_id, namespace_id, queue_id, instance_id, activation_id, source_round in batch:
        instance = instances.get(instance_id)
        activation = activations.get(activation_id)
        if instance is None or instance[0] != namespace_id or activation is None or activation[1] != instance_id:
            yield Violation("task_source", "task, activation and instance disagree on ownership", (task_id,))
            continue
        key, kind = steps[activation[0]]
        definition = definitions.get(instance[1])
        spec = definition.step_spec(key) if definition else None
        if spec is None or queue_names.get(queue_id) != spec.get("queue"):
            yield Violation("task_queue", "task is not on its step's fixed queue", (task_id, queue_id or ""))
        named = (activation_id, task_id, source_round) in rounds
        if kind in _NOT_NAMED and not task_named_back(
            kind=kind, activation_task_id=activation[2], task_id=task_id, round_names_task=named
        ):
            code, message = _NOT_NAMED[kind]
            yield Violation(code, message, (task_id, activation_id) if kind == StepKind.TASK else (task_id,))


def _gaps(model, owner: str, number: str) -> Iterator[str]:
    """Owners whose rows are not numbered exactly 1..n (the numbers are unique per owner)."""
    rows = (
        model.objects.values(owner)
        .annotate(n=Count("id"), low=Min(number), high=Max(number))
        .filter(~Q(low=1) | ~Q(high=F("n")))
        .values_list(owner, flat=True)
    )
    return rows.iterator()


def _sequences() -> Iterator[Violation]:
    for step_id in _gaps(Activation, "step_id", "sequence"):
        yield Violation("activation_sequence_gap", "activation sequences are not 1..n", (step_id,))
    for task_id in _gaps(ResultEvent, "task_id", "seq"):
        yield Violation("result_sequence_gap", "result event sequences are not 1..n", (task_id,))


def _late_evidence() -> Iterator[Violation]:
    """A late event is a RESULT of one UNKNOWN attempt of its task, once, whose record is only LATE_RECORDED."""
    late = ResultEvent.objects.filter(late=True)
    for batch in _batches(late, "id", "task_id", "attempt_id", "kind", "outcome"):
        attempts = _by_id(Attempt, (row[2] for row in batch), "task_id", "state")
        records = {
            source_id: (state, disposition)
            for source_id, state, disposition in InboxRecord.objects.filter(
                source_kind=InboxSource.RESULT_EVENT, source_id__in=[row[0] for row in batch]
            ).values_list("source_id", "state", "disposition")
        }
        for event_id, task_id, attempt_id, kind, outcome in batch:
            if attempts.get(attempt_id) != (task_id, AttemptState.UNKNOWN):
                yield Violation("late_event_attempt", "late event names no UNKNOWN attempt of its task", (event_id,))
            if kind != ResultKind.RESULT or outcome not in ("SUCCEEDED", "FAILED"):
                yield Violation("late_event_kind", f"late event is {kind} {outcome}, not a completion", (event_id,))
            if records.get(event_id) != (InboxState.CONSUMED, Disposition.LATE_RECORDED):
                yield Violation("late_event_record", "late event's record is not consumed LATE_RECORDED", (event_id,))
    repeated = late.values("attempt_id").annotate(n=Count("id")).filter(n__gt=1)
    for attempt_id, count in repeated.values_list("attempt_id", "n").iterator():
        yield Violation("late_event_repeated", f"{count} late events of one attempt", (attempt_id or "",))


def _current_is_latest() -> Iterator[Violation]:
    latest = Activation.objects.filter(step_id=OuterRef("pk")).values("step_id").annotate(high=Max("sequence"))
    steps = Step.objects.exclude(current_activation_id=None).annotate(latest=Subquery(latest.values("high")))
    for batch in _batches(steps, "id", "current_activation__sequence", "latest"):
        for step_id, sequence, high in batch:
            if sequence != high:
                yield Violation(
                    "step_current_not_latest", f"current activation is #{sequence}, not the latest", (step_id,)
                )


def _waits() -> Iterator[Violation]:
    for batch in _batches(Wait.objects.all(), "id", "activation_id", "step_id", "winner_signal_id"):
        activation_step = _by_id(Activation, (row[1] for row in batch), "step_id")
        consumed = _by_id(Signal, (row[3] for row in batch), "consumed_wait_id")
        for wait_id, activation_id, step_id, winner in batch:
            if activation_step.get(activation_id) != step_id:
                yield Violation("wait_activation", "wait and its activation disagree on the step", (wait_id,))
            if winner is not None and consumed.get(winner) != wait_id:
                yield Violation("wait_winner", "winner signal was not consumed by this wait", (wait_id, winner))
    for batch in _batches(Activation.objects.exclude(wait_id=None), "id", "wait_id"):
        wait_activation = _by_id(Wait, (row[1] for row in batch), "activation_id")
        for activation_id, wait_id in batch:
            if wait_activation.get(wait_id) != activation_id:
                yield Violation(
                    "activation_wait", "activation.wait_id is not a wait of this activation", (activation_id,)
                )


def _retry_chain() -> Iterator[Violation]:
    retried = Task.objects.exclude(retry_of_id=None).values("retry_of_id")
    for task_id, count in retried.annotate(n=Count("id")).filter(n__gt=1).values_list("retry_of_id", "n").iterator():
        yield Violation("retry_of_successors", f"{count} tasks retry the same task", (task_id,))
    missing = retried.filter(~Exists(Task.objects.filter(pk=OuterRef("retry_of_id")))).distinct()
    for task_id in missing.values_list("retry_of_id", flat=True).iterator():
        yield Violation("retry_of_missing", "retry_of names a missing task", (task_id,))


def _quota() -> Iterator[Violation]:
    holding = Task.objects.filter(permit_held=True)
    held_by_app = dict(holding.values("application_id").annotate(n=Count("id")).values_list("application_id", "n"))
    held_by_queue = dict(holding.values("queue_id").annotate(n=Count("id")).values_list("queue_id", "n"))
    for model, held, label in ((Application, held_by_app, "application"), (Queue, held_by_queue, "queue")):
        for row_id, active in model.objects.values_list("id", "active_tasks").iterator():
            if active != held.get(row_id, 0):
                yield Violation(
                    "quota_drift",
                    f"{label} counts {active} active tasks, {held.get(row_id, 0)} permits held",
                    (row_id,),
                )
    terminal = Task.objects.filter(permit_held=True, state__in=TERMINAL_TASK_STATES)
    for task_id, state in terminal.values_list("id", "state").iterator():
        yield Violation("terminal_task_holds_permit", f"{state} task still holds a permit", (task_id,))
    live = Task.objects.filter(permit_held=False).exclude(state__in=TERMINAL_TASK_STATES)
    for task_id in live.values_list("id", flat=True).iterator():
        yield Violation("live_task_without_permit", "a task that is not terminal holds no permit", (task_id,))


def _attempts() -> Iterator[Violation]:
    for batch in _batches(Task.objects.all(), "id", "attempt_count", "state"):
        attempts = Attempt.objects.filter(task_id__in=[row[0] for row in batch]).values("task_id")
        counts = dict(attempts.annotate(n=Count("id")).values_list("task_id", "n"))
        running = dict(attempts.filter(state=AttemptState.RUNNING).annotate(n=Count("id")).values_list("task_id", "n"))
        for task_id, attempt_count, state in batch:
            if counts.get(task_id, 0) != attempt_count:
                yield Violation(
                    "attempt_count", f"attempt_count {attempt_count}, {counts.get(task_id, 0)} rows", (task_id,)
                )
            if running.get(task_id, 0) != (1 if state == TaskState.LEASED else 0):
                yield Violation(
                    "attempt_running", f"{state} task has {running.get(task_id, 0)} RUNNING attempts", (task_id,)
                )


def _revisions_and_gates() -> Iterator[Violation]:
    children = (
        (Step, "instance_id"),
        (Activation, "instance_id"),
        (Task, "source_instance_id"),
        (Signal, "workflow_id"),
    )
    instances = WorkflowInstance.objects.all()
    for batch in _batches(instances, "id", "revision", "state", "paused"):
        ids = [row[0] for row in batch]
        newest: dict[str, int] = defaultdict(int)
        for model, field in children:
            rows = model.objects.filter(**{f"{field}__in": ids}).values(field).annotate(r=Max("revision"))
            for instance_id, revision in rows.values_list(field, "r"):
                newest[instance_id] = max(newest[instance_id], revision)
        gates = {
            row[0]: row[1:] for row in Gate.objects.filter(pk__in=ids).values_list("instance_id", "open", "revision")
        }
        for instance_id, revision, state, paused in batch:
            gate = gates.get(instance_id)
            child = max(newest.get(instance_id, 0), gate[1] if gate else 0)
            if revision < child:
                yield Violation(
                    "revision_behind_children", f"instance revision {revision} < child revision {child}", (instance_id,)
                )
            if gate is None:
                yield Violation("gate_missing", "instance has no gate", (instance_id,))
            elif gate[0] != (state == InstanceState.RUNNING and not paused):
                yield Violation(
                    "gate_state", f"gate open={gate[0]} for a {state} paused={paused} instance", (instance_id,)
                )


def _review_causes() -> Iterator[Violation]:
    """In review ⇔ a cause and a time are recorded; outside review, cause, step and time are blank; the
    step, when named, is one of the instance's."""
    in_review = Q(state=InstanceState.NEEDS_REVIEW)
    unrecorded = WorkflowInstance.objects.filter(in_review & (Q(review_cause="") | Q(review_since=None)))
    for instance_id in unrecorded.values_list("id", flat=True).iterator():
        yield Violation("review_cause_missing", "instance in review records no cause or no time", (instance_id,))
    left = WorkflowInstance.objects.filter(
        ~in_review & (~Q(review_cause="") | ~Q(review_step_key="") | Q(review_since__isnull=False))
    )
    for instance_id, state in left.values_list("id", "state").iterator():
        yield Violation("review_cause_stale", f"{state} instance still records a review cause", (instance_id,))
    named = WorkflowInstance.objects.exclude(review_step_key="")
    unknown = named.filter(~Exists(Step.objects.filter(instance_id=OuterRef("pk"), key=OuterRef("review_step_key"))))
    for instance_id, key in unknown.values_list("id", "review_step_key").iterator():
        yield Violation("review_step_unknown", f"review names step {key}, not a step of the instance", (instance_id,))


def _inbox() -> Iterator[Violation]:
    result_records = InboxRecord.objects.filter(source_kind=InboxSource.RESULT_EVENT)
    for batch in _batches(ResultEvent.objects.all(), "id"):
        records = result_records.filter(source_id__in=[row[0] for row in batch]).values("source_id")
        counts = dict(records.annotate(n=Count("id")).values_list("source_id", "n"))
        for (event_id,) in batch:
            if counts.get(event_id, 0) != 1:
                yield Violation(
                    "result_event_record", f"result event has {counts.get(event_id, 0)} inbox records", (event_id,)
                )
    for batch in _batches(result_records.distinct(), "source_id"):
        events = _by_id(ResultEvent, (row[0] for row in batch), "id")
        for (event_id,) in batch:
            if event_id not in events:
                yield Violation("record_without_event", "inbox record names a missing result event", (event_id,))
    signal_records = InboxRecord.objects.filter(source_kind=InboxSource.SIGNAL)
    for batch in _batches(Signal.objects.all(), "id"):
        recorded = set(
            signal_records.filter(source_id__in=[row[0] for row in batch]).values_list("source_id", flat=True)
        )
        for (signal_id,) in batch:
            if signal_id not in recorded:
                yield Violation("signal_without_record", "accepted signal has no inbox record", (signal_id,))
    quarantined = InboxRecord.objects.filter(state=InboxState.QUARANTINED)
    for record_id, instance_id, reason in quarantined.values_list("id", "instance_id", "quarantine_reason").iterator():
        yield Violation("quarantined_record", f"corruption: {reason}", (record_id, instance_id))


# Each followed row with a state, and the column (path) naming its instance.
_FOLLOWED = (
    (WorkflowInstance, "id"),
    (Step, "instance_id"),
    (Activation, "instance_id"),
    (Task, "source_instance_id"),
    (Attempt, "task__source_instance_id"),
    (Wait, "instance_id"),
    (Signal, "workflow_id"),
    (InboxRecord, "instance_id"),
)


def _timeline() -> Iterator[Violation]:
    """Sequences are 1..n per instance, and the latest created/state event of each followed row names the
    state the row holds. A row without an event must be in its initial state (a step PENDING), unless its
    instance's timeline starts with a reconstructed prefix written before the timeline existed."""
    for instance_id in _gaps(InstanceEvent, "instance_id", "sequence"):
        yield Violation("event_sequence_gap", "event sequences are not 1..n", (instance_id,))
    for model, instance in _FOLLOWED:
        events = InstanceEvent.objects.filter(instance_id=OuterRef(instance), subject_id=OuterRef("pk"))
        latest = events.filter(kind__endswith=".state") | events.filter(kind__endswith=".created")
        rows = model.objects.annotate(
            latest=Subquery(latest.order_by("-sequence").values("after")[:1]),
            prefix=Exists(InstanceEvent.objects.filter(instance_id=OuterRef(instance), reconstructed=True)),
        ).filter(Q(latest__isnull=True, prefix=False) | ~Q(latest=F("state")))
        if model is Step:
            rows = rows.exclude(latest__isnull=True, state=StepState.PENDING)
        for row_id, state, after in rows.values_list("pk", "state", "latest").iterator():
            if after is None:
                yield Violation("event_missing", f"{model.__name__} {state} has no created event", (row_id,))
            else:
                message = f"{model.__name__} is {state}, its latest event says {after}"
                yield Violation("event_state_mismatch", message, (row_id,))


def _step_counters() -> Iterator[Violation]:
    """Each step's counters against its rows: one grouped join for the activations and one correlated sum
    per step for the attempts of its earlier activations' tasks (TASK steps; 0 for the others)."""
    counted = Step.objects.annotate(rows=Count("activations")).filter(~Q(activation_count=F("rows")))
    for step_id, counter, rows in counted.values_list("id", "activation_count", "rows").iterator():
        yield Violation("step_counter_drift", f"activation_count {counter}, {rows} activations", (step_id,))
    earlier = (
        Task.objects.filter(source_activation__step_id=OuterRef("pk"))
        .exclude(source_activation_id=OuterRef("current_activation_id"))
        .values("source_activation__step_id")
        .annotate(n=Sum("attempt_count"))
        .values("n")
    )
    expected = Case(When(kind=StepKind.TASK, then=Coalesce(Subquery(earlier), 0)), default=0)
    drifted = Step.objects.annotate(expected=expected).filter(~Q(attempts_before=F("expected")))
    for step_id, counter, attempts in drifted.values_list("id", "attempts_before", "expected").iterator():
        message = f"attempts_before {counter}, the earlier activations' tasks ran {attempts}"
        yield Violation("step_counter_drift", message, (step_id,))


CHECKS = (
    _ownership,
    _sequences,
    _late_evidence,
    _current_is_latest,
    _waits,
    _retry_chain,
    _quota,
    _attempts,
    _revisions_and_gates,
    _review_causes,
    _inbox,
    _timeline,
    _step_counters,
)


def invariants_stream() -> Iterator[Violation]:
    """Every violation of the engine's invariants, with the ids involved, as each check finds it."""
    for check in CHECKS:
        yield from check()


def invariants_check() -> list[Violation]:
    """Every violation of the engine's invariants, collected in a list."""
    return list(invariants_stream())
