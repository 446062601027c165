"""A POLL step's next round: rounds left, the total query deadline, when the round is due, and the wait for it.

After a PENDING answer the next round is due at the creation of the result event that carried the
answer plus the frozen interval — never "now + interval". It needs a round left (used < max) and
must be due before the total query deadline. The inbox applies the rule as the answer arrives; the
operator's ContinuePoll applies it later and passes ``now``: the deadline must then also still be
ahead. The inbox needs no such check because the round pass reviews a round that comes due after
the deadline (``poll_deadline_passed``). A missing limit reads as no round left and no deadline.
"""

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from engine.state import touch
from history.models import Activation, ActivationState, Step, StepState


class NoRound(StrEnum):
    """Why a POLL activation may not open another round."""

    ROUNDS_USED = "ROUNDS_USED"
    DEADLINE_PASSED = "DEADLINE_PASSED"
    DUE_AFTER_DEADLINE = "DUE_AFTER_DEADLINE"


@dataclass(frozen=True)
class NextRound:
    """When the next round is due, and why it may not happen (None when it may)."""

    due_at: dt.datetime
    refusal: NoRound | None


def poll_deadline_passed(activation: Activation, now: dt.datetime) -> bool:
    """Whether the activation's total query deadline is at or before ``now``."""
    return activation.poll_deadline_at is not None and activation.poll_deadline_at <= now


def poll_rounds_left(activation: Activation, *, now: dt.datetime | None = None) -> NoRound | None:
    """Why no further round may open, judged on the limits alone (no answer needed); None when one may.

    All rounds used comes first; with ``now``, a total query deadline already passed.
    """
    if (activation.used_rounds or 0) >= (activation.max_rounds or 0):
        return NoRound.ROUNDS_USED
    if now is not None and poll_deadline_passed(activation, now):
        return NoRound.DEADLINE_PASSED
    return None


def poll_next_round(activation: Activation, *, answered_at: dt.datetime, now: dt.datetime | None = None) -> NextRound:
    """The next round after the PENDING answer created at ``answered_at``: its due time and any refusal.

    ``used_rounds`` already counts the answered round. ``now`` is given by an operator continuing the
    poll after the answer (see the module docstring).
    """
    due_at = answered_at + dt.timedelta(seconds=activation.interval_seconds or 0)
    refusal = poll_rounds_left(activation, now=now)
    if refusal is None and activation.poll_deadline_at is not None and due_at >= activation.poll_deadline_at:
        refusal = NoRound.DUE_AFTER_DEADLINE
    return NextRound(due_at=due_at, refusal=refusal)


def poll_round_await(*, step: Step, activation: Activation, due_at: dt.datetime, now: dt.datetime) -> None:
    """An operator's confirmed PENDING: the activation and step WAITING again for the next round at ``due_at``.

    Nothing is queried again and the instance stays in review. Saves both rows.
    """
    touch(activation, now, state=ActivationState.WAITING, next_round_at=due_at)
    touch(step, now, state=StepState.WAITING)
