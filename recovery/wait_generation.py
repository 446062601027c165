"""A new wait generation for a step in review: RearmWait's for a SIGNAL or TIMER step, RetryStep's for a
POLL step whose final-signal wait broke. The engine supersedes the old activation and wait and opens
the next generation with the same contract, correlation key, deadline and fire_at; a signal buffered
for the step meanwhile is taken by that generation in the same transaction, and the preview shows it.
"""

import datetime as dt
from dataclasses import dataclass

from core.errors import FailedPrecondition, Unavailable
from core.times import format_optional_time
from engine.activation import wait_supersede, wait_supersede_foreseen
from history.audits import activation_snapshot, step_snapshot, wait_snapshot
from history.models import ActivationState, Disposition, SignalState, StepState, Wait, WaitState
from recovery.context import Context
from recovery.pipeline import Effect, Plan, change
from recovery.step_history import StepHistory

# The step, new activation, new wait and buffered signal after the operation: the new generation waits, or it
# takes a buffered signal at once and the signal's disposition decides (``engine.signaling.wait_satisfy``).
_WAITS = (StepState.WAITING, ActivationState.WAITING, WaitState.WAITING, None)
_TAKES = {
    Disposition.APPLIED: (StepState.SUCCEEDED, ActivationState.SUCCEEDED, WaitState.SATISFIED, SignalState.CONSUMED),
    Disposition.CONTRACT_VIOLATION: (
        StepState.NEEDS_REVIEW,
        ActivationState.NEEDS_REVIEW,
        WaitState.NEEDS_REVIEW,
        SignalState.REJECTED,
    ),
}


@dataclass
class RearmPlan(Plan):
    history: StepHistory
    wait: Wait
    now: dt.datetime

    def preview(self) -> dict:
        step, current, wait = self.history.step, self.history.current, self.wait
        taken = wait_supersede_foreseen(
            step=step, activation=current, wait=wait, step_spec=self.history.spec, now=self.now
        )
        step_after, activation_after, wait_after, signal_after = _TAKES[taken[1]] if taken else _WAITS
        preview = {
            "step_key": step.key,
            "step": {"state": change(step.state, step_after)},
            "activation": {"id": current.id, "state": change(current.state, ActivationState.SUPERSEDED)},
            "new_activation": {"sequence": current.sequence + 1, "state": activation_after},
            "wait": {
                "id": wait.id,
                "state": change(wait.state, WaitState.SUPERSEDED),
                "winner_signal_id": wait.winner_signal_id,
            },
            "new_wait": {"generation": wait.generation + 1, "state": wait_after},
            "deadlines_kept": {
                "deadline_at": format_optional_time(wait.deadline_at),
                "fire_at": format_optional_time(wait.fire_at),
            },
        }
        if taken:
            signal, disposition = taken
            if disposition == Disposition.APPLIED:
                preview["new_wait"]["winner_signal_id"] = signal.id
            preview["buffered_signal"] = {
                "id": signal.id,
                "accepted_at": format_optional_time(signal.accepted_at),
                "disposition": disposition,
                "state": change(signal.state, signal_after),
            }
        return preview


def wait_rearmable(ctx: Context, history: StepHistory) -> Wait:
    """The current activation's wait, in review and before its original deadline."""
    current = history.current
    wait = history.wait
    if wait is None:
        raise Unavailable(f"activation {current.id} of a {history.step.kind} step has no wait")
    if wait.state != WaitState.NEEDS_REVIEW:
        raise FailedPrecondition(f"wait generation {wait.generation} is {wait.state}, not NEEDS_REVIEW")
    if wait.deadline_at <= ctx.now:
        raise FailedPrecondition(
            f"the wait's deadline {format_optional_time(wait.deadline_at)} has passed; it is never extended"
        )
    return wait


def wait_generation_next(ctx: Context, *, history: StepHistory, wait: Wait) -> Effect:
    """The engine's next wait generation for the step, with the before and after of each row it changed."""
    step, current = history.step, history.current
    before = {"step": step_snapshot(step), "activation": activation_snapshot(current), "wait": wait_snapshot(wait)}
    activation, new_wait, taken = wait_supersede(
        instance=ctx.instance,
        gate=ctx.gate,
        step=step,
        activation=current,
        wait=wait,
        step_spec=history.spec,
        now=ctx.now,
    )
    after = {
        "step": step_snapshot(step),
        "activation": activation_snapshot(current),
        "wait": wait_snapshot(wait),
        "new_activation": activation_snapshot(activation),
        "new_wait": wait_snapshot(new_wait),
    }
    if taken is not None:
        before["buffered_signal"] = {"id": taken.id, "state": SignalState.PENDING}
        after["buffered_signal"] = {"id": taken.id, "state": taken.state, "disposition": taken.disposition}
    return Effect(before=before, after=after, step_key=step.key, activation=activation)
