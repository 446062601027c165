"""Starting instances and controlling them: pause, resume, cancel."""

import datetime as dt
from typing import Any

from core import clock, fields
from core.errors import Aborted, FailedPrecondition, NotFound
from core.identity import Identity
from core.ids import MAX_UINT32, ROOT_STEP_KEY
from engine.activation import correlation_key_of
from engine.advance import continuation_create
from engine.definitions import MAX_SECONDS
from engine.state import FINISHED, gate_sync, instance_control_touch
from history import idempotency
from history.audits import audit_write, instance_summary
from history.events import acting_for, row_created
from history.idempotency import Receipt
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Gate,
    InstanceState,
    Scope,
    Step,
    StepKind,
    StepState,
    StopKind,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.access import instance_get_readable
from history.tenancy import is_name

START_FIELDS = ("definition", "version", "input", "business_key", "deadline_seconds")
CONTROL_FIELDS = ("expected_control_revision", "reason")


def _definition_of(*, identity: Identity, command: dict) -> WorkflowDefinition:
    name = command.get("definition")
    if not fields.is_text(name) or not is_name(name):
        raise fields.refuse("definition", "a definition name")
    query = WorkflowDefinition.objects.filter(namespace_id=identity.namespace_id, name=name)
    if "version" in command:
        version = fields.integer("version", command["version"], low=1, high=MAX_UINT32)
        query = query.filter(version=version)
    definition = query.order_by("-version").first()
    if definition is None or not identity.can_access_queues(definition.queues):
        raise NotFound(f"definition {name} not found", field="definition")
    return definition


def instance_start(*, identity: Identity, command: Any, idempotency_key: Any, request_id: str = "") -> Receipt:
    """Start an instance: RUNNING, gate open, one Step per node plus ``$root``, a root continuation.

    Command: ``{definition, version?, input, business_key?, deadline_seconds?}``. ``input`` is kept
    byte-exact; ``deadline_seconds`` defaults to the definition's. Idempotent per Idempotency-Key;
    audited as ``workflow.start``. The runner's continuation pass activates the first steps.
    """
    identity.require_scope(Scope.WRITE)
    key = idempotency.key_check(idempotency_key)
    command = fields.command_object(command, allowed=START_FIELDS)
    definition = _definition_of(identity=identity, command=command)
    input_text = fields.json_text("input", fields.required(command, "input", what="any JSON"))
    business_key = fields.text("business_key", command.get("business_key", ""), max_length=256, blank=True)
    deadline_seconds = command.get("deadline_seconds", definition.spec["deadline_seconds"])
    # null: no deadline at all.
    if command.get("deadline_seconds") is not None:
        deadline_seconds = fields.integer("deadline_seconds", command["deadline_seconds"], low=1, high=MAX_SECONDS)
    now = clock.now()
    instance = WorkflowInstance(
        namespace_id=identity.namespace_id,
        definition=definition,
        business_key=business_key,
        input=input_text,
        deadline_at=now + dt.timedelta(seconds=deadline_seconds) if deadline_seconds else None,
        created_at=now,
        updated_at=now,
    )
    for spec in definition.spec["steps"]:
        signal_spec = spec if spec["kind"] == StepKind.SIGNAL else spec.get("final_signal")
        if signal_spec:
            correlation_key_of(instance=instance, source=signal_spec["correlation"])

    def work(locks: LockSet) -> dict:
        instance.save()
        Gate.objects.create(instance=instance, open=True)
        root = Step(
            instance=instance,
            key=ROOT_STEP_KEY,
            kind=StepKind.ROOT,
            state=StepState.ACTIVE,
            created_at=now,
            updated_at=now,
        )
        Step.objects.bulk_create(
            [root]
            + [
                Step(instance=instance, key=spec["key"], kind=spec["kind"], created_at=now, updated_at=now)
                for spec in definition.spec["steps"]
            ]
        )
        # The other steps start PENDING, their initial state, which needs no event; the root starts ACTIVE.
        row_created(root)
        continuation_create(instance=instance)
        summary = instance_summary(instance, definition)
        audit_write(
            model=WorkflowOperation,
            namespace_id=identity.namespace_id,
            actor_id=identity.actor_id,
            action="workflow.start",
            reason="",
            request_id=request_id,
            before=None,
            after=summary,
            now=now,
            workflow=instance,
        )
        return summary

    with acting_for(identity):
        return idempotency.receipt_run(
            namespace_id=identity.namespace_id,
            key=key,
            operation="workflow.start",
            target=definition.id,
            command=command,
            work=work,
            status=201,
        )


def _control(*, identity: Identity, instance_id: str, command: Any, action: str, change, request_id: str) -> dict:
    identity.require_scope(Scope.CONTROL)
    command = fields.command_object(command, allowed=CONTROL_FIELDS)
    expected = fields.revision("expected_control_revision", fields.required(command, "expected_control_revision"))
    reason = fields.reason("reason", command["reason"]) if "reason" in command else ""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    definition = instance.definition

    def work() -> dict:
        locks = LockSet()
        locked = locks.lock_one(Level.INSTANCE, instance.id)
        gate = locks.lock_one(Level.GATE, instance.id)
        if locked.control_revision != expected:
            raise Aborted(
                f"control_revision is {locked.control_revision}, not {expected}", field="expected_control_revision"
            )
        if locked.state in FINISHED:
            raise FailedPrecondition(f"the instance is already {locked.state}")
        before = instance_summary(locked, definition)
        change(locked)
        gate_sync(gate=gate, instance=locked)
        now = clock.now()
        instance_control_touch(instance=locked, now=now)
        after = instance_summary(locked, definition)
        audit_write(
            model=WorkflowOperation,
            namespace_id=identity.namespace_id,
            actor_id=identity.actor_id,
            action=action,
            reason=reason,
            request_id=request_id,
            before=before,
            after=after,
            now=now,
            workflow=locked,
        )
        return after

    with acting_for(identity):
        return atomic_with_retry(work)


def instance_pause(*, identity: Identity, instance_id: str, command: Any, request_id: str = "") -> dict:
    """Set paused (gate closed) on an unfinished, unpaused instance; bumps revision and control_revision."""

    def change(instance: WorkflowInstance) -> None:
        if instance.paused:
            raise FailedPrecondition("the instance is already paused")
        instance.paused = True

    return _control(
        identity=identity,
        instance_id=instance_id,
        command=command,
        action="workflow.pause",
        change=change,
        request_id=request_id,
    )


def instance_resume(*, identity: Identity, instance_id: str, command: Any, request_id: str = "") -> dict:
    """Clear paused; the gate opens only if the instance is RUNNING. Bumps revision and control_revision."""

    def change(instance: WorkflowInstance) -> None:
        if not instance.paused:
            raise FailedPrecondition("the instance is not paused")
        instance.paused = False

    return _control(
        identity=identity,
        instance_id=instance_id,
        command=command,
        action="workflow.resume",
        change=change,
        request_id=request_id,
    )


def instance_cancel(*, identity: Identity, instance_id: str, command: Any, request_id: str = "") -> dict:
    """Record stop_kind CANCEL: RUNNING → CANCELLING (gate closed); NEEDS_REVIEW stays in review.

    An instance that already carries a stop intent is refused (FAILED_PRECONDITION).
    """

    def change(instance: WorkflowInstance) -> None:
        if instance.stop_kind:
            raise FailedPrecondition(f"the instance already carries the stop intent {instance.stop_kind}")
        instance.stop_kind = StopKind.CANCEL
        instance.stop_reason = (command.get("reason") if isinstance(command, dict) else "") or "cancelled"
        if instance.state == InstanceState.RUNNING:
            instance.state = InstanceState.CANCELLING

    return _control(
        identity=identity,
        instance_id=instance_id,
        command=command,
        action="workflow.cancel",
        change=change,
        request_id=request_id,
    )
