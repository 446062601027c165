"""What the background does once an operation commits, shown before it commits.

No second rule set: the operation's own service commits and the engine's own code takes in what it
leaves — the instance's inbox records consumed, its continuations applied, a stop settled — inside
one transaction that is then rolled back. Nothing is written; the picture of the instance before and
after is what the operator sees.
"""

from django.db import transaction

from core.identity import Identity
from core.ids import new_id
from core.metrics import uncounted
from engine.advance import continuations_apply
from engine.inbox import inbox_consume_next
from engine.stop import instance_stop_settle
from history.models import Activation, InstanceState, Step, StepKind, Task, TaskState, WorkflowInstance
from recovery.operations import OPERATIONS
from recovery.pipeline import rolled_back_preview

# Rounds of the background's work followed; one operation's consequences settle in two or three.
ROUNDS = 10


class _Undo(Exception):
    """Carries the picture out of the transaction it rolls back."""


def operation_consequences(*, identity: Identity, operation: str, instance_id: str, command: dict) -> list[tuple]:
    """``(what, now, after the background)`` for each thing the operation and the background's response to it
    would change; a refusal raises exactly as the commit would."""
    try:
        with uncounted(), rolled_back_preview(), transaction.atomic():
            before = _picture(instance_id)
            OPERATIONS[operation].service(
                identity=identity, instance_id=instance_id, idempotency_key=f"preview-{new_id()}", command=command
            )
            for _ in range(ROUNDS):
                moved = inbox_consume_next(instance_id=instance_id) is not None
                moved = continuations_apply(instance_id=instance_id) > 0 or moved
                if WorkflowInstance.objects.filter(pk=instance_id, state=InstanceState.CANCELLING).exists():
                    moved = instance_stop_settle(instance_id=instance_id) or moved
                if not moved:
                    break
            after = _picture(instance_id)
            raise _Undo([(what, before.get(what, "—"), now) for what, now in after.items() if before.get(what) != now])
    except _Undo as undone:
        return undone.args[0]


def _picture(instance_id: str) -> dict[str, str]:
    """The instance, each step and its current activation, and its open tasks, as the operator reads them."""
    instance = WorkflowInstance.objects.get(pk=instance_id)
    picture = {
        "instance": instance.state,
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
            if activation.used_rounds is not None:
                picture[f"{name} rounds used"] = f"{activation.used_rounds} of {activation.max_rounds}"
                picture[f"{name} last round"] = activation.last_round_classification or "—"
    open_tasks = Task.objects.filter(source_instance_id=instance_id, state__in=[TaskState.QUEUED, TaskState.LEASED])
    picture["tasks queued or running"] = str(open_tasks.count())
    return picture
