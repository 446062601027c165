"""The invariant checker behind ``weave_check``: broken relations, quota drift, revision order.

Reads only. Each check streams the rows it needs with ``values_list`` and compares them in
memory, so the query count is fixed whatever the table sizes.
"""

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Count, Max, Min

from history.models import (
    TERMINAL_TASK_STATES,
    Activation,
    Application,
    Attempt,
    AttemptState,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    PollRound,
    Queue,
    ResultEvent,
    Signal,
    Step,
    StepKind,
    Task,
    TaskState,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
)


@dataclass(frozen=True)
class Violation:
    code: str
    message: str
    ids: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.code}: {self.message} [{', '.join(self.ids)}]"


def _ownership() -> Iterator[Violation]:
    instances = dict(WorkflowInstance.objects.values_list("id", "namespace_id"))
    definitions = {d.id: d for d in WorkflowDefinition.objects.all()}
    instance_definition = dict(WorkflowInstance.objects.values_list("id", "definition_id"))
    steps = {
        row[0]: row for row in Step.objects.values_list("id", "instance_id", "key", "kind", "current_activation_id")
    }
    activations = {
        row[0]: row for row in Activation.objects.values_list("id", "step_id", "instance_id", "task_id", "sequence")
    }
    queue_names = dict(Queue.objects.values_list("id", "name"))
    rounds = set(PollRound.objects.values_list("activation_id", "task_id", "round"))
    for step_id, instance_id, key, _kind, current in steps.values():
        if instance_id not in instances:
            yield Violation("step_orphan", f"step {key} names a missing instance", (step_id, instance_id))
        if current is not None and (current not in activations or activations[current][1] != step_id):
            yield Violation(
                "step_current_activation", "current activation is not one of the step's", (step_id, current)
            )
    tasks = list(
        Task.objects.values_list(
            "id", "namespace_id", "queue_id", "source_instance_id", "source_activation_id", "source_round"
        )
    )
    task_source = {row[0]: row[4] for row in tasks}
    for activation_id, task_id, _ in rounds:
        if task_source.get(task_id) != activation_id:
            yield Violation("poll_round_task", "poll round's task is sourced by another activation", (task_id,))
    for activation_id, step_id, instance_id, task_id, _ in activations.values():
        step = steps.get(step_id)
        if step is None or step[1] != instance_id:
            yield Violation("activation_step", "activation and its step disagree on the instance", (activation_id,))
        if task_id is not None and task_source.get(task_id) != activation_id:
            yield Violation(
                "activation_task", "activation.task_id is not a task sourced by it", (activation_id, task_id)
            )
    for task_id, namespace_id, queue_id, instance_id, activation_id, source_round in tasks:
        activation = activations.get(activation_id)
        if instances.get(instance_id) != namespace_id or activation is None or activation[2] != instance_id:
            yield Violation("task_source", "task, activation and instance disagree on ownership", (task_id,))
            continue
        step = steps[activation[1]]
        definition = definitions.get(instance_definition.get(instance_id))
        spec = definition.step_spec(step[2]) if definition else None
        if spec is None or queue_names.get(queue_id) != spec.get("queue"):
            yield Violation("task_queue", "task is not on its step's fixed queue", (task_id, queue_id or ""))
        if step[3] == StepKind.TASK and activation[3] != task_id:
            yield Violation("task_activation", "TASK activation does not name this task", (task_id, activation_id))
        if step[3] == StepKind.POLL and (activation_id, task_id, source_round) not in rounds:
            yield Violation("task_poll_round", "query task has no poll round under its activation", (task_id,))


def _sequences() -> Iterator[Violation]:
    rows = Activation.objects.values("step_id").annotate(n=Count("id"), low=Min("sequence"), high=Max("sequence"))
    for row in rows:
        if row["low"] != 1 or row["high"] != row["n"]:
            yield Violation("activation_sequence_gap", "activation sequences are not 1..n", (row["step_id"],))


def _current_is_latest() -> Iterator[Violation]:
    latest = dict(Activation.objects.values("step_id").annotate(high=Max("sequence")).values_list("step_id", "high"))
    current = Step.objects.exclude(current_activation_id=None).values_list("id", "current_activation__sequence")
    for step_id, sequence in current:
        if sequence != latest.get(step_id):
            yield Violation("step_current_not_latest", f"current activation is #{sequence}, not the latest", (step_id,))


def _waits() -> Iterator[Violation]:
    activation_wait = dict(Activation.objects.exclude(wait_id=None).values_list("id", "wait_id"))
    activation_step = dict(Activation.objects.values_list("id", "step_id"))
    consumed = dict(Signal.objects.exclude(consumed_wait_id=None).values_list("id", "consumed_wait_id"))
    for wait_id, activation_id, step_id, winner in Wait.objects.values_list(
        "id", "activation_id", "step_id", "winner_signal_id"
    ):
        if activation_step.get(activation_id) != step_id:
            yield Violation("wait_activation", "wait and its activation disagree on the step", (wait_id,))
        if winner is not None and consumed.get(winner) != wait_id:
            yield Violation("wait_winner", "winner signal was not consumed by this wait", (wait_id, winner))
    waits = set(Wait.objects.values_list("id", "activation_id"))
    for activation_id, wait_id in activation_wait.items():
        if (wait_id, activation_id) not in waits:
            yield Violation("activation_wait", "activation.wait_id is not a wait of this activation", (activation_id,))


def _retry_chain() -> Iterator[Violation]:
    successors = Counter(Task.objects.exclude(retry_of_id=None).values_list("retry_of_id", flat=True))
    for task_id, count in successors.items():
        if count > 1:
            yield Violation("retry_of_successors", f"{count} tasks retry the same task", (task_id,))
    known = set(Task.objects.filter(id__in=list(successors)).values_list("id", flat=True))
    for task_id in set(successors) - known:
        yield Violation("retry_of_missing", "retry_of names a missing task", (task_id,))


def _quota() -> Iterator[Violation]:
    held_by_app = Counter(Task.objects.filter(permit_held=True).values_list("application_id", flat=True))
    held_by_queue = Counter(Task.objects.filter(permit_held=True).values_list("queue_id", flat=True))
    for model, held, label in ((Application, held_by_app, "application"), (Queue, held_by_queue, "queue")):
        for row_id, active in model.objects.values_list("id", "active_tasks"):
            if active != held.get(row_id, 0):
                yield Violation(
                    "quota_drift",
                    f"{label} counts {active} active tasks, {held.get(row_id, 0)} permits held",
                    (row_id,),
                )
    for task_id, state in Task.objects.filter(permit_held=True, state__in=TERMINAL_TASK_STATES).values_list(
        "id", "state"
    ):
        yield Violation("terminal_task_holds_permit", f"{state} task still holds a permit", (task_id,))
    for task_id in (
        Task.objects.filter(permit_held=False).exclude(state__in=TERMINAL_TASK_STATES).values_list("id", flat=True)
    ):
        yield Violation("live_task_without_permit", "a task that is not terminal holds no permit", (task_id,))


def _attempts() -> Iterator[Violation]:
    counts = dict(Attempt.objects.values("task_id").annotate(n=Count("id")).values_list("task_id", "n"))
    running = Counter(Attempt.objects.filter(state=AttemptState.RUNNING).values_list("task_id", flat=True))
    for task_id, attempt_count, state in Task.objects.values_list("id", "attempt_count", "state"):
        if counts.get(task_id, 0) != attempt_count:
            yield Violation(
                "attempt_count", f"attempt_count {attempt_count}, {counts.get(task_id, 0)} rows", (task_id,)
            )
        if running.get(task_id, 0) != (1 if state == TaskState.LEASED else 0):
            yield Violation(
                "attempt_running", f"{state} task has {running.get(task_id, 0)} RUNNING attempts", (task_id,)
            )


def _revisions_and_gates() -> Iterator[Violation]:
    newest: dict[str, int] = defaultdict(int)
    for model, field in (
        (Step, "instance_id"),
        (Activation, "instance_id"),
        (Task, "source_instance_id"),
        (Signal, "workflow_id"),
    ):
        for instance_id, revision in model.objects.values(field).annotate(r=Max("revision")).values_list(field, "r"):
            newest[instance_id] = max(newest[instance_id], revision)
    gates = dict(Gate.objects.values_list("instance_id", "open"))
    gate_revisions = dict(Gate.objects.values_list("instance_id", "revision"))
    for instance_id, revision, state, paused in WorkflowInstance.objects.values_list(
        "id", "revision", "state", "paused"
    ):
        child = max(newest.get(instance_id, 0), gate_revisions.get(instance_id, 0))
        if revision < child:
            yield Violation(
                "revision_behind_children", f"instance revision {revision} < child revision {child}", (instance_id,)
            )
        if instance_id not in gates:
            yield Violation("gate_missing", "instance has no gate", (instance_id,))
        elif gates[instance_id] != (state == InstanceState.RUNNING and not paused):
            yield Violation(
                "gate_state", f"gate open={gates[instance_id]} for a {state} paused={paused} instance", (instance_id,)
            )


def _inbox() -> Iterator[Violation]:
    records = Counter(
        InboxRecord.objects.filter(source_kind=InboxSource.RESULT_EVENT).values_list("source_id", flat=True)
    )
    events = set(ResultEvent.objects.values_list("id", flat=True))
    for event_id in events:
        if records.get(event_id, 0) != 1:
            yield Violation(
                "result_event_record", f"result event has {records.get(event_id, 0)} inbox records", (event_id,)
            )
    for event_id in set(records) - events:
        yield Violation("record_without_event", "inbox record names a missing result event", (event_id,))
    signal_records = set(InboxRecord.objects.filter(source_kind=InboxSource.SIGNAL).values_list("source_id", flat=True))
    for signal_id in set(Signal.objects.values_list("id", flat=True)) - signal_records:
        yield Violation("signal_without_record", "accepted signal has no inbox record", (signal_id,))
    for record_id, instance_id, reason in InboxRecord.objects.filter(state=InboxState.QUARANTINED).values_list(
        "id", "instance_id", "quarantine_reason"
    ):
        yield Violation("quarantined_record", f"corruption: {reason}", (record_id, instance_id))


CHECKS = (
    _ownership,
    _sequences,
    _current_is_latest,
    _waits,
    _retry_chain,
    _quota,
    _attempts,
    _revisions_and_gates,
    _inbox,
)


def invariants_check() -> list[Violation]:
    """Every violation of the engine's invariants, with the ids involved."""
    return [violation for check in CHECKS for violation in check()]
