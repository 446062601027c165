"""ContinuePoll: resume a POLL step's original wait after an authoritative PENDING.

The next round follows the engine's POLL rule (``engine.poll``): due at the creation of the result
event that carried the PENDING answer plus the frozen interval, with a round left, before the total
query deadline, and — the operator continuing after the answer — with that deadline still ahead.
The same round is never queried again; inbox dispositions are not rewritten; review stays.
"""

import datetime as dt
from dataclasses import dataclass

from core.errors import FailedPrecondition, Unavailable
from core.times import format_optional_time
from engine.poll import NoRound, poll_next_round, poll_round_await, poll_rounds_left
from history.audits import activation_snapshot, step_snapshot
from history.models import (
    Activation,
    ActivationState,
    Disposition,
    InboxRecord,
    InboxSource,
    ResultEvent,
    ResultKind,
    StepKind,
    StepState,
)
from recovery.commands import Declaration, StepDecision
from recovery.context import Context
from recovery.pipeline import Effect, Operation, Plan, change
from recovery.step_history import StepHistory, step_decision_resolve


@dataclass(frozen=True)
class ContinuePollCommand(StepDecision):
    declaration = Declaration(
        "pending_confirmed",
        asserts="the PENDING answer of the last round is authoritative",
        wording="The PENDING answer of the last round is authoritative: the business result really is not ready.",
    )

    pending_confirmed: bool


@dataclass
class ContinuePollPlan(Plan):
    history: StepHistory
    next_round_at: dt.datetime

    def preview(self) -> dict:
        step, current = self.history.step, self.history.current
        return {
            "step_key": step.key,
            "step": {"state": change(step.state, StepState.WAITING)},
            "activation": {
                "id": current.id,
                "sequence": current.sequence,
                "state": change(current.state, ActivationState.WAITING),
                "next_round_at": change(
                    format_optional_time(current.next_round_at), format_optional_time(self.next_round_at)
                ),
            },
            "rounds": {"used": current.used_rounds, "max": current.max_rounds},
            "deadlines_kept": {"poll_deadline_at": format_optional_time(current.poll_deadline_at)},
        }


def _pending_carrier(ctx: Context, history: StepHistory) -> ResultEvent:
    """The result event (RESULT or REVIEWED) whose consumed answer was the authoritative PENDING."""
    current = history.current
    event = (
        ResultEvent.objects.filter(task_id=current.last_task_id, kind__in=[ResultKind.RESULT, ResultKind.REVIEWED])
        .filter(outcome="SUCCEEDED", late=False)  # late evidence was never an answer the activation took
        .order_by("-seq")
        .first()
    )
    if event is None:
        raise Unavailable(f"activation {current.id} was classified PENDING without a successful result event")
    disposition = (
        InboxRecord.objects.filter(source_kind=InboxSource.RESULT_EVENT, source_id=event.id)
        .values_list("disposition", flat=True)
        .first()
    )
    if disposition != Disposition.APPLIED:
        raise FailedPrecondition(f"the PENDING answer of event {event.id} was not applied to the activation")
    return event


def _refuse(activation: Activation, refusal: NoRound | None, *, due_at: dt.datetime | None = None) -> None:
    """FAILED_PRECONDITION, in the operator's words, when the POLL rule allows no next round."""
    if refusal == NoRound.ROUNDS_USED:
        raise FailedPrecondition(f"all {activation.max_rounds} rounds are used: resolve the step instead")
    if refusal == NoRound.DEADLINE_PASSED:
        raise FailedPrecondition("the total query deadline has passed")
    if refusal == NoRound.DUE_AFTER_DEADLINE:
        raise FailedPrecondition(
            f"the next round would be due at {format_optional_time(due_at)}, not before the total query deadline"
        )


class ContinuePoll(Operation):
    """Put a POLL step in review back into its original wait after a confirmed PENDING answer.

    Needs pending_confirmed=true, a consumed and applied PENDING classification of the last
    round, rounds left and a next round (event time + frozen interval) before the query deadline.
    """

    name = "continue-poll"
    title = "Continue poll"
    target = "step"
    step_kinds = (StepKind.POLL,)
    command_class = ContinuePollCommand

    def check(self, ctx: Context, command: ContinuePollCommand) -> ContinuePollPlan:
        history = step_decision_resolve(ctx, command)
        step, current = history.step, history.current
        if step.kind not in self.step_kinds:
            raise FailedPrecondition(f"ContinuePoll applies to POLL steps; {step.key!r} is {step.kind}")
        if current.state != ActivationState.NEEDS_REVIEW:
            raise FailedPrecondition(f"activation {current.sequence} is {current.state}, not NEEDS_REVIEW")
        problem = history.unsettled
        if problem:
            raise FailedPrecondition(problem)
        if current.last_round_classification != "PENDING" or current.last_task_id is None:
            raise FailedPrecondition("the last round has no consumed PENDING classification to continue from")
        # The limits are judged before the answer is looked up: a refusal needs no query.
        _refuse(current, poll_rounds_left(current, now=ctx.now))
        event = _pending_carrier(ctx, history)
        next_round = poll_next_round(current, answered_at=event.created_at, now=ctx.now)
        _refuse(current, next_round.refusal, due_at=next_round.due_at)
        return ContinuePollPlan(history=history, next_round_at=next_round.due_at)

    def apply(self, ctx: Context, command: ContinuePollCommand, plan: ContinuePollPlan, *, operation_id: str) -> Effect:
        step, activation = plan.history.step, plan.history.current
        before = {"step": step_snapshot(step), "activation": activation_snapshot(activation)}
        poll_round_await(step=step, activation=activation, due_at=plan.next_round_at, now=ctx.now)
        after = {
            "step": step_snapshot(step),
            "activation": activation_snapshot(activation) | {"next_round_at": format_optional_time(plan.next_round_at)},
        }
        return Effect(before=before, after=after, step_key=step.key, activation=activation)


CONTINUE_POLL = ContinuePoll()

poll_continue = CONTINUE_POLL.service
