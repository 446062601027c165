"""Signals: acceptance (with its audit and inbox record) and matching to waits."""

import datetime as dt
from typing import Any

from django.db.models import Exists, OuterRef

from core import clock, fields
from core.errors import FailedPrecondition, InvalidArgument
from core.identity import Identity
from core.ids import MAX_UINT32
from engine.definitions import contract_violation
from engine.state import FINISHED, step_enter_review, touch
from history import idempotency
from history.audits import audit_write, signal_snapshot
from history.events import acting_for
from history.idempotency import Receipt
from history.locking import Level, LockSet
from history.models import (
    Activation,
    ActivationState,
    Disposition,
    Gate,
    InboxRecord,
    InboxSource,
    InboxState,
    ReviewCause,
    Scope,
    Signal,
    SignalOperation,
    SignalState,
    Step,
    StepKind,
    StepState,
    Wait,
    WaitKind,
    WaitState,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.selectors.access import instance_get_readable

SIGNAL_FIELDS = (
    "name",
    "payload_version",
    "payload",
    "correlation_key",
    "target_step_key",
    "target_activation_sequence",
    "reason",
    "evidence_ref",
)


def signal_spec_of(step_spec: dict | None) -> dict | None:
    """The signal contract of a SIGNAL step or of a POLL step's final signal; None for other steps."""
    if step_spec is None:
        return None
    if step_spec["kind"] == StepKind.SIGNAL:
        return step_spec
    if step_spec["kind"] == StepKind.POLL:
        return step_spec.get("final_signal")
    return None


def _target_step(definition: WorkflowDefinition, command: dict, name: str) -> tuple[str, dict]:
    if "target_step_key" not in command:
        matching = [s for s in definition.spec["steps"] if (signal_spec_of(s) or {}).get("name") == name]
        if len(matching) != 1:
            raise InvalidArgument(
                f"target_step_key: required, {len(matching)} steps of the definition await signal {name!r}",
                field="target_step_key",
            )
        return matching[0]["key"], signal_spec_of(matching[0])
    key = fields.step_key("target_step_key", command["target_step_key"])
    spec = signal_spec_of(definition.step_spec(key))
    if spec is None:
        raise InvalidArgument(
            f"target_step_key: {key} is not a SIGNAL step (or POLL with a final signal) of the definition",
            field="target_step_key",
        )
    return key, spec


def signal_accept(
    *, identity: Identity, instance_id: str, command: Any, idempotency_key: Any, request_id: str = ""
) -> Receipt:
    """Store a signal PENDING with its ``workflow.signal`` audit (before null, after the acceptance snapshot)
    and its inbox record, in one transaction; idempotent per Idempotency-Key.

    The target step must be a SIGNAL step or a POLL step with a final signal of the fixed
    definition (400, nothing stored). Matching happens when the runner consumes the record; a signal
    buffered then is taken when a wait of its step appears (``wait_take_buffered``).
    """
    identity.require_scope(Scope.WRITE)
    key = idempotency.key_check(idempotency_key)
    command = fields.command_object(command, allowed=SIGNAL_FIELDS)
    name = fields.text("name", fields.required(command, "name"), max_length=128)
    payload_version = fields.text("payload_version", fields.required(command, "payload_version"), max_length=64)
    payload = fields.json_text("payload", fields.required(command, "payload", what="any JSON"))
    correlation_key = fields.text(
        "correlation_key", fields.required(command, "correlation_key"), max_length=256, blank=True
    )
    sequence = 0
    if "target_activation_sequence" in command:
        sequence = fields.integer(
            "target_activation_sequence", command["target_activation_sequence"], low=1, high=MAX_UINT32
        )
    reason = fields.reason("reason", fields.required(command, "reason"))
    evidence_ref = fields.token("evidence_ref", command["evidence_ref"]) if "evidence_ref" in command else ""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    definition = instance.definition
    step_key, spec = _target_step(definition, command, name)

    def work(locks: LockSet) -> dict:
        locked = locks.lock_one(Level.INSTANCE, instance.id)
        if locked.state in FINISHED:
            raise FailedPrecondition(f"the instance is {locked.state}: it accepts no signal")
        now = clock.now()
        signal = Signal.objects.create(
            namespace_id=identity.namespace_id,
            workflow=locked,
            name=name,
            payload_version=payload_version,
            payload=payload,
            correlation_key=correlation_key,
            target_step_key=step_key,
            target_activation_sequence=sequence,
            accepted_at=now,
            expires_at=now + dt.timedelta(seconds=spec["signal_ttl_seconds"]),
            actor_id=identity.actor_id,
            evidence_ref=evidence_ref,
        )
        snapshot = signal_snapshot(signal)
        operation = audit_write(
            model=SignalOperation,
            namespace_id=identity.namespace_id,
            actor_id=identity.actor_id,
            action="workflow.signal",
            reason=reason,
            evidence_ref=evidence_ref,
            request_id=request_id,
            before=None,
            after=snapshot,
            now=now,
            workflow=locked,
            signal=signal,
        )
        touch(locked, now)
        InboxRecord.objects.create(
            instance=locked, source_kind=InboxSource.SIGNAL, source_id=signal.id, signal=signal, created_at=now
        )
        return {
            "workflow_id": locked.id,
            "signal_id": signal.id,
            "operation_id": operation.operation_id,
            "state": signal.state,
            "revision": str(locked.revision),
            "accepted_at": snapshot["accepted_at"],
            "expires_at": snapshot["expires_at"],
        }

    with acting_for(identity):
        return idempotency.receipt_run(
            namespace_id=identity.namespace_id,
            key=key,
            operation="workflow.signal",
            target=instance.id,
            command=command,
            work=work,
            status=201,
        )


def _matches(signal: Signal, wait: Wait, activation: Activation) -> bool:
    return (
        signal.name == wait.signal_name
        and signal.payload_version == wait.payload_version
        and signal.correlation_key == wait.correlation_key
        and signal.accepted_at <= wait.deadline_at
        and signal.target_activation_sequence <= activation.sequence
    )


def wait_winner(
    *, wait: Wait, activation: Activation, step: Step, now: dt.datetime, consuming: Signal | None = None
) -> Signal | None:
    """The oldest (accepted_at, id) PENDING, unexpired signal of the step that matches the wait.

    Candidates are the signal being consumed and signals whose inbox record was already
    consumed (buffered); a signal whose record is still pending waits for its own turn. A signal
    past its expires_at is never matched (the runner marks it EXPIRED).
    """
    consumed_record = InboxRecord.objects.filter(
        source_kind=InboxSource.SIGNAL, source_id=OuterRef("id"), state=InboxState.CONSUMED
    )
    candidates = Signal.objects.filter(
        workflow_id=wait.instance_id, target_step_key=step.key, state=SignalState.PENDING, expires_at__gt=now
    ).filter(Exists(consumed_record))
    # The key again in Python: MariaDB's collations compare text without case.
    found = [s for s in candidates if s.target_step_key == step.key and _matches(s, wait, activation)]
    if (
        consuming is not None
        and consuming.state == SignalState.PENDING
        and consuming.expires_at > now
        and _matches(consuming, wait, activation)
    ):
        found.append(consuming)
    return min(found, key=lambda s: (s.accepted_at, s.id)) if found else None


def wait_satisfy(
    *,
    instance: WorkflowInstance,
    gate: Gate,
    step: Step,
    activation: Activation,
    wait: Wait,
    signal: Signal,
    step_spec: dict,
    now: dt.datetime,
) -> Disposition:
    """Apply the winning signal: wait SATISFIED, signal CONSUMED, activation and step SUCCEEDED with the payload.

    A payload that breaks the step's contract is not corruption: wait, activation, step and
    instance go to NEEDS_REVIEW and the signal is REJECTED (CONTRACT_VIOLATION) — the RearmWait entry.
    The caller continues the graph after a step that succeeded.
    """
    violation = contract_violation(step_spec=step_spec, value_text=signal.payload)
    if violation is not None:
        wait.state = WaitState.NEEDS_REVIEW
        signal.state = SignalState.REJECTED
        signal.disposition = Disposition.CONTRACT_VIOLATION
        reason = f"signal {signal.id} breaks the contract of {step.key}: {violation}"
        step_enter_review(
            instance=instance,
            gate=gate,
            step=step,
            activation=activation,
            reason=reason,
            cause=ReviewCause.SIGNAL_CONTRACT_VIOLATION,
            now=now,
        )
        disposition = Disposition.CONTRACT_VIOLATION
    else:
        wait.state = WaitState.SATISFIED
        wait.winner_signal = signal
        activation.state = ActivationState.SUCCEEDED
        activation.output = signal.payload
        activation.completed_at = now
        step.state = StepState.SUCCEEDED
        step.output = signal.payload
        signal.state = SignalState.CONSUMED
        signal.disposition = Disposition.APPLIED
        signal.consumed_wait = wait
        disposition = Disposition.APPLIED
    for row in (step, activation, wait, signal):
        touch(row, now)
    return disposition


def _buffered_winner(wait: Wait, activation: Activation, step: Step, now: dt.datetime) -> Signal | None:
    return None if wait.kind == WaitKind.TIMER else wait_winner(wait=wait, activation=activation, step=step, now=now)


def wait_take_buffered(
    *,
    instance: WorkflowInstance,
    gate: Gate,
    step: Step,
    activation: Activation,
    wait: Wait,
    step_spec: dict,
    now: dt.datetime,
) -> Signal | None:
    """A signal wait that appears takes the oldest matching signal buffered for its step, in its own transaction.

    Every path that creates a WAITING wait calls this (a SIGNAL step's activation, a POLL's final-signal
    wait, a new wait generation) with the instance locked and the step already WAITING on the wait's
    activation, so a signal that arrived early or between generations is never left behind. Buffered
    means PENDING with its inbox record consumed; the rule is ``wait_winner``'s, the effect
    ``wait_satisfy``'s: the step SUCCEEDED with the payload, or the wait in review when it breaks the
    contract. Returns the signal taken, or None (the wait stays WAITING; a TIMER takes none). The
    caller continues the graph after a step that succeeded and bumps the instance.
    """
    winner = _buffered_winner(wait, activation, step, now)
    if winner is not None:
        wait_satisfy(
            instance=instance,
            gate=gate,
            step=step,
            activation=activation,
            wait=wait,
            signal=winner,
            step_spec=step_spec,
            now=now,
        )
    return winner


def wait_take_foreseen(
    *, wait: Wait, activation: Activation, step: Step, step_spec: dict, now: dt.datetime
) -> tuple[Signal, Disposition] | None:
    """What ``wait_take_buffered`` would do for this wait and activation, without writing: the signal it
    would take and whether it satisfies the wait (APPLIED) or breaks the contract (CONTRACT_VIOLATION)."""
    winner = _buffered_winner(wait, activation, step, now)
    if winner is None:
        return None
    broken = contract_violation(step_spec=step_spec, value_text=winner.payload) is not None
    return winner, Disposition.CONTRACT_VIOLATION if broken else Disposition.APPLIED
