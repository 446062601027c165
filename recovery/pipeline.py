"""The frame every recovery operation runs in, and what an operation is.

Every operation runs through ``operation_execute``, which fixes one order of checks and writes, so a
command with several faults is always refused for the first of them:
scope → command → idempotency → instance (namespace, queues) → NEEDS_REVIEW → inbox clean →
the operation's own checks (references → revisions → ownership → rules → quota) → writes →
revision bump → workflow audit → receipt → (ReviewTask) the result event, last.

An operation is a small object with ``check`` (reads and locks, raises in that order, returns
a plan) and ``apply`` (writes the plan by composing the engine's transitions: it never writes
an engine row itself). The same ``check`` runs without locks for the eligibility and preview
of ``recovery.eligibility``: one rule set, never two. Each operation also carries what the API,
the console and the eligibility show of it, so every table of operations is built from the one
list in ``recovery.operations``.
"""

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from types import MappingProxyType

from django.db import transaction

from core import clock
from core.errors import Aborted, Unauthenticated, WeaveError
from core.identity import Identity
from core.ids import new_id
from core.metrics import RECOVERY_OPERATIONS, count
from engine.state import instance_control_touch
from history import idempotency
from history.audits import audit_write, instance_snapshot
from history.events import acting_for
from history.idempotency import KeyRaced, Receipt, receipt_claim, receipt_freeze, receipt_replay
from history.locking import Level, LockSet, atomic_with_retry
from history.models import (
    Activation,
    Credential,
    ExecutionAudit,
    Scope,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.access import instance_definition_visible
from recovery.commands import Command, instance_id_check
from recovery.context import Context, context_open

KEY_RACE_ATTEMPTS = 3


def change(before, after) -> dict:
    """One value of a preview that the operation changes."""
    return {"before": before, "after": after}


class Plan(abc.ABC):
    """What a checked command will write; ``preview`` shows it without writing."""

    # The instance state and gate after the operation; None keeps them (review stays).
    instance_state: str | None = None
    gate_open: bool | None = None

    @abc.abstractmethod
    def preview(self) -> dict:
        """States before → after and what is kept, for the operator to confirm."""


@dataclass
class Effect:
    """What an operation wrote, for the workflow audit and the receipt."""

    before: dict
    after: dict
    step_key: str = ""
    activation: Activation | None = None
    task_id: str | None = None
    execution_audit: ExecutionAudit | None = None


class Operation(abc.ABC):
    """One recovery operation: its names and words, its command, checks and writes.

    The class docstring of each operation is what its service does, for the reader of the code.
    """

    name: str  # the API path segment, e.g. "retry-step"
    title: str  # the console's name of it, e.g. "Retry step"
    target: str  # what the command names inside the instance: "task", "step" or "instance"
    command_class: type[Command]
    # The step kinds it applies to (empty: every kind); a step of another kind never qualifies.
    step_kinds: tuple[str, ...] = ()
    # It creates a task, so it can meet a full application or queue quota (RESOURCE_EXHAUSTED).
    takes_quota: bool = False
    # The command fields an eligibility judges it with, beyond the revisions it reads and the declaration.
    preview_defaults: Mapping[str, object] = MappingProxyType({})

    @property
    def action(self) -> str:
        """The audit action, e.g. ``workflow.retry_step``."""
        return f"workflow.{self.name.replace('-', '_')}"

    @property
    def declaration(self) -> str:
        """The command field the operator sets to declare what the server cannot verify (its words are the
        command class's ``declaration``)."""
        return self.command_class.declaration.field

    @property
    def with_conclusion(self) -> bool:
        """The operator concludes SUCCEEDED or FAILED with a result."""
        return "conclusion" in {f.name for f in fields(self.command_class)}

    @cached_property
    def service(self) -> Callable[..., Receipt]:
        """``operation_execute`` of this operation, named after it: what the API and the console call."""

        def service(*, identity: Identity, instance_id: str, idempotency_key: str, command: dict, request_id: str = ""):
            try:
                receipt = operation_execute(
                    operation=self,
                    identity=identity,
                    instance_id=instance_id,
                    idempotency_key=idempotency_key,
                    command=command,
                    request_id=request_id,
                )
            except WeaveError as error:
                count(RECOVERY_OPERATIONS, self.name, error.code)
                raise
            outcome = "replayed" if receipt.replayed else "committed"
            # Counted once the outermost transaction commits: nothing when it is rolled back.
            transaction.on_commit(lambda: count(RECOVERY_OPERATIONS, self.name, outcome))
            return receipt

        service.__name__ = service.__qualname__ = self.name.replace("-", "_")
        service.__doc__ = self.__doc__
        return service

    @abc.abstractmethod
    def check(self, ctx: Context, command) -> Plan:
        """Read (and lock, when committing) what the command needs; raise in the fixed order."""

    @abc.abstractmethod
    def apply(self, ctx: Context, command, plan, *, operation_id: str) -> Effect:
        """Write the checked plan through the engine's transitions."""

    def publish(self, ctx: Context, plan) -> None:  # noqa: B027 - most operations publish nothing
        """Writes that must come after everything else (the result stream); none by default."""


def operation_execute(
    *,
    operation: Operation,
    identity: Identity,
    instance_id: str,
    idempotency_key: str,
    command: dict,
    request_id: str,
) -> Receipt:
    """Run one recovery command: validated, idempotent, checked in the fixed order, one transaction."""
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    idempotency.key_check(idempotency_key)
    parsed = operation.command_class.parse(command)
    fingerprint = idempotency.fingerprint(operation=operation.name, target=instance_id, command=command)
    for _ in range(KEY_RACE_ATTEMPTS):
        try:
            return atomic_with_retry(
                lambda: _commit(
                    operation=operation,
                    identity=identity,
                    instance_id=instance_id,
                    key=idempotency_key,
                    fingerprint=fingerprint,
                    command=parsed,
                    request_id=request_id,
                )
            )
        except KeyRaced:
            continue
    raise Aborted("the instance changed while the command ran; read it again")


def _credential_recheck(locks: LockSet, identity: Identity) -> None:
    if identity.credential_id is None:
        return
    credential: Credential | None = locks.lock_one(Level.CREDENTIAL, identity.credential_id)
    now = clock.now()
    if (
        credential is None
        or credential.revoked_at is not None
        or (credential.expires_at is not None and credential.expires_at <= now)
    ):
        raise Unauthenticated("the credential was revoked or expired")


def _commit(*, operation, identity, instance_id, key, fingerprint, command, request_id) -> Receipt:
    locks = LockSet()
    _credential_recheck(locks, identity)
    row = receipt_claim(
        locks=locks,
        namespace_id=identity.namespace_id,
        key=key,
        fingerprint=fingerprint,
        operation=operation.name,
        instance_id=instance_id,
    )
    if row.response:
        instance = WorkflowInstance.objects.filter(pk=row.workflow_id).first()
        instance_definition_visible(identity=identity, instance=instance)
        return receipt_replay(row=row)
    ctx = context_open(identity=identity, instance_id=instance_id, locks=locks)
    ctx.request_id = request_id
    plan = operation.check(ctx, command)
    instance, gate = ctx.instance, ctx.gate
    before = instance_snapshot(instance, gate)
    operation_id = new_id()
    # Every event of the operation's writes names its actor and operation.
    with acting_for(identity, operation_id=operation_id):
        effect = operation.apply(ctx, command, plan, operation_id=operation_id)
        instance_control_touch(instance=instance, now=ctx.now)
        audit = audit_write(
            model=WorkflowOperation,
            namespace_id=instance.namespace_id,
            actor_id=identity.actor_id,
            action=operation.action,
            reason=command.reason,
            evidence_ref=command.evidence_ref,
            request_id=request_id,
            before={"instance": before, **effect.before},
            after={"instance": instance_snapshot(instance, gate), **effect.after},
            now=ctx.now,
            workflow=instance,
            operation_id=operation_id,
            step_key=effect.step_key,
            activation=effect.activation,
            execution_audit=effect.execution_audit,
        )
        receipt = receipt_freeze(row=row, data=_receipt_data(operation, instance, audit, effect))
        operation.publish(ctx, plan)
    return receipt


def _receipt_data(operation: Operation, instance: WorkflowInstance, audit: WorkflowOperation, effect: Effect) -> dict:
    data = {"operation_id": audit.operation_id}
    if effect.execution_audit is not None:
        data["execution_operation_id"] = effect.execution_audit.operation_id
    data |= {
        "operation": operation.action,
        "workflow_id": instance.id,
        "revision": str(instance.revision),
        "control_revision": str(instance.control_revision),
        "state": instance.state,
        "paused": instance.paused,
    }
    if effect.step_key:
        data["step_key"] = effect.step_key
    if effect.activation is not None:
        data["activation_id"] = effect.activation.id
        data["activation_sequence"] = effect.activation.sequence
    if effect.task_id is not None:
        data["task_id"] = effect.task_id
    return data
