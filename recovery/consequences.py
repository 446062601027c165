"""What the background does once an operation commits, shown before it commits.

No second rule set: the operation's own service commits and the engine's own code takes in what it
leaves — the instance's inbox records consumed, its continuations applied, a stop settled — inside
one transaction that is then rolled back. Nothing is written; the picture of the instance before and
after is what the operator sees. A pause, resume or cancel and a signal are previewed the same way, and a
decision's whole chain, step by step.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from core.errors import FailedPrecondition, WeaveError
from core.identity import Identity
from core.ids import new_id
from core.metrics import uncounted
from engine.advance import continuations_apply
from engine.inbox import inbox_consume_next
from engine.signaling import signal_accept
from engine.stop import instance_stop_settle
from history.models import (
    Activation,
    InboxRecord,
    InboxSource,
    InstanceState,
    Step,
    StepKind,
    Task,
    TaskState,
    WorkflowInstance,
)
from recovery.decisions import MAX_STEPS, DecisionWaiting, decision_command_parse, decision_next_step, decision_subject
from recovery.operations import OPERATIONS
from recovery.pipeline import rolled_back_preview
from recovery.step_history import step_conclusion

# Rounds of the background's work followed; one operation's consequences settle in two or three.
ROUNDS = 10


class _Undo(Exception):
    """Carries the picture out of the transaction it rolls back."""


def operation_consequences(*, identity: Identity, operation: str, instance_id: str, command: dict) -> list[tuple]:
    """``(what, now, after the background)`` for each thing the operation and the background's response to it
    would change; a refusal raises exactly as the commit would."""

    def write() -> None:
        OPERATIONS[operation].service(
            identity=identity, instance_id=instance_id, idempotency_key=f"preview-{new_id()}", command=command
        )

    return _rolled_back(instance_id, write)[1]


def control_consequences(*, control: Callable[..., dict], identity: Identity, instance_id: str, command: dict):
    """The same for a pause, resume or cancel: ``control`` is the engine's service of it."""
    return _rolled_back(instance_id, lambda: control(identity=identity, instance_id=instance_id, command=command))[1]


def signal_consequences(*, identity: Identity, instance_id: str, command: dict) -> tuple[str, list[tuple]]:
    """The same for a signal, with the disposition the background gives its inbox record: APPLIED (it satisfies
    the step's open wait), CONTRACT_VIOLATION (it matches, but its payload breaks the contract), BUFFERED (kept
    for a wait of the step to come), REJECTED (not the step's name or version); blank when the records ahead of
    it kept the preview's rounds from reaching it."""

    def write() -> str:
        key = f"preview-{new_id()}"
        receipt = signal_accept(identity=identity, instance_id=instance_id, command=command, idempotency_key=key)
        return receipt.data["signal_id"]

    def disposition(signal_id: str) -> str:
        record = InboxRecord.objects.filter(source_kind=InboxSource.SIGNAL, source_id=signal_id)
        return record.values_list("disposition", flat=True).first() or ""

    return _rolled_back(instance_id, write, disposition)


@dataclass(frozen=True)
class ChainStep:
    """One step of a decision's chain as it would run now: the operation and what it and the background's
    response change; or, ending the chain, the refusal that would stop it there."""

    operation: str
    rows: list[tuple] = field(default_factory=list)
    refusal: WeaveError | None = None


def decision_consequences(*, identity: Identity, instance_id: str, command: dict) -> list[ChainStep]:
    """The whole chain of a decision, each step run as the decision would run it with the background taking in
    each step before the next, all of it rolled back; a command the decision would refuse raises as it would."""
    parsed = decision_command_parse(command)
    chain: list[ChainStep] = []
    try:
        with uncounted(), rolled_back_preview(), transaction.atomic():
            instance = decision_subject(identity=identity, instance_id=instance_id, parsed=parsed)
            while len(chain) < MAX_STEPS and (not chain or instance.state == InstanceState.NEEDS_REVIEW):
                before = _picture(instance_id)
                try:
                    name, step = decision_next_step(identity, parsed, instance, started=bool(chain))
                    OPERATIONS[name].service(
                        identity=identity, instance_id=instance_id, idempotency_key=f"preview-{new_id()}", command=step
                    )
                except (WeaveError, DecisionWaiting) as stop:
                    refusal = stop if isinstance(stop, WeaveError) else FailedPrecondition(str(stop))
                    chain.append(ChainStep(operation="", refusal=refusal))
                    break
                _settle(instance_id)
                chain.append(ChainStep(operation=OPERATIONS[name].title, rows=_changes(before, _picture(instance_id))))
                instance = WorkflowInstance.objects.get(pk=instance_id)
            raise _Undo(chain)
    except _Undo as undone:
        return undone.args[0]


def _rolled_back(instance_id: str, write: Callable, then: Callable = lambda _: None) -> tuple:
    """``then(write())`` read once the background has taken in what ``write`` left, and the changed picture
    rows; all of it rolled back."""
    try:
        with uncounted(), rolled_back_preview(), transaction.atomic():
            before = _picture(instance_id)
            written = write()
            _settle(instance_id)
            raise _Undo(then(written), _changes(before, _picture(instance_id)))
    except _Undo as undone:
        return undone.args


def _settle(instance_id: str) -> None:
    """The background's response to a write: the instance's inbox consumed, its continuations applied, a stop
    settled, until nothing moves."""
    for _ in range(ROUNDS):
        moved = inbox_consume_next(instance_id=instance_id) is not None
        moved = continuations_apply(instance_id=instance_id) > 0 or moved
        if WorkflowInstance.objects.filter(pk=instance_id, state=InstanceState.CANCELLING).exists():
            moved = instance_stop_settle(instance_id=instance_id) or moved
        if not moved:
            return


def _changes(before: dict[str, str], after: dict[str, str]) -> list[tuple]:
    return [(what, before.get(what, "—"), now) for what, now in after.items() if before.get(what) != now]


def _picture(instance_id: str) -> dict[str, str]:
    """The instance, each step and its current activation, and its open tasks, as the operator reads them."""
    instance = WorkflowInstance.objects.get(pk=instance_id)
    picture = {
        "instance": instance.state,
        "instance paused": "yes" if instance.paused else "no",
        "instance review cause": instance.review_cause or "—",
        "instance stop intent": instance.stop_kind or "—",
    }
    steps = list(Step.objects.filter(instance_id=instance_id).exclude(kind=StepKind.ROOT).order_by("key"))
    current = Activation.objects.in_bulk([s.current_activation_id for s in steps if s.current_activation_id])
    for step in steps:
        picture[f"step {step.key}"] = step.state
        activation = current.get(step.current_activation_id)
        if activation is not None:
            name = f"step {step.key} activation #{activation.sequence}"
            picture[name] = activation.state
            if activation.verified_outcome:
                picture[f"{name} verified outcome"] = activation.verified_outcome
            # A step concluded by hand keeps its state; its conclusion is what Continue then accepts.
            if step_conclusion(step):
                picture[f"{name} concluded by hand"] = step_conclusion(step)
            if activation.used_rounds is not None:
                picture[f"{name} rounds used"] = f"{activation.used_rounds} of {activation.max_rounds}"
                picture[f"{name} last round"] = activation.last_round_classification or "—"
    open_tasks = Task.objects.filter(source_instance_id=instance_id, state__in=[TaskState.QUEUED, TaskState.LEASED])
    picture["tasks queued or running"] = str(open_tasks.count())
    return picture
