"""The frame every recovery operation runs in, and what an operation is.

Every operation runs through ``operation_execute``, which fixes one order of checks and writes, so a
command with several faults is always refused for the first of them:
scope → command → idempotency → instance (namespace, queues) → NEEDS_REVIEW → inbox clean →
the operation's own checks (references → revisions → ownership → rules → quota) → writes →
revision bump → workflow audit → receipt → (ReviewTask) the result event, last.

Where an approval policy asks for a second person (``history.proposals``), a command that passes
every check is stored as a proposal (202) instead of its writes; ``proposal_approve`` later runs the
stored command through the same frame, with the proposal locked after the key, and its revisions
decide whether anything moved since (409). Both doors count the operation's outcome in one place,
``operation_counted``.

An operation is a small object with ``check`` (reads and locks, raises in that order, returns
a plan) and ``apply`` (writes the plan by composing the engine's transitions: it never writes
an engine row itself). The same ``check`` runs without locks for the eligibility and preview
of ``recovery.eligibility``: one rule set, never two. Each operation also carries what the API,
the console and the eligibility show of it, so every table of operations is built from the one
list in ``recovery.operations``.
"""

import abc
import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from types import MappingProxyType

from django.db import transaction

from core import clock, exactjson
from core.errors import Aborted, Unauthenticated, WeaveError
from core.identity import Identity
from core.ids import ROOT_STEP_KEY, new_id
from core.logs import log_context
from core.metrics import RECOVERY_OPERATIONS, STEP_REPAIRS, count
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
    Proposal,
    ProposalState,
    Scope,
    WorkflowInstance,
    WorkflowOperation,
)
from history.proposals import (
    approvals_required,
    approver_check,
    proposal_close,
    proposal_expiry,
    proposal_held,
    proposal_snapshot,
)
from history.selectors.access import instance_definition_visible
from recovery.commands import Command, instance_id_check
from recovery.context import Context, context_open

KEY_RACE_ATTEMPTS = 3
PROPOSED = 202
APPROVE = "proposal.approve"

# Set while a rolled-back preview runs an operation's service: no policy holds back what is undone anyway.
_rolled_back = contextvars.ContextVar("weave_rolled_back_preview", default=False)


# Set while the steps of a decision a second person approved run: the approval covered the whole chain.
_approved_decision = contextvars.ContextVar("weave_approved_decision", default=None)


@contextlib.contextmanager
def approved_decision(approval: dict) -> Iterator[None]:
    """For ``recovery.decisions`` only: run an approved decision's steps unheld, each audited with ``approval``
    (the decision's id, its proposer and its approver)."""
    token = _approved_decision.set(approval)
    try:
        yield
    finally:
        _approved_decision.reset(token)


@contextlib.contextmanager
def rolled_back_preview() -> Iterator[None]:
    """For ``recovery.consequences`` only, whose transaction is always rolled back: commit as if approved."""
    token = _rolled_back.set(True)
    try:
        yield
    finally:
        _rolled_back.reset(token)


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
    # Concludes the step by hand: the console's Next offers it after the operations that keep the step's work going.
    concludes_by_hand: bool = False
    # The words of its bulk action on the instance list; empty: it has none.
    bulk: str = ""
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
            return operation_counted(
                operation=self.name,
                run=lambda: operation_execute(
                    operation=self,
                    identity=identity,
                    instance_id=instance_id,
                    idempotency_key=idempotency_key,
                    command=command,
                    request_id=request_id,
                ),
            )

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


def plan_preview(ctx: Context, operation: Operation, plan: Plan) -> dict:
    """What a checked command changes, as the eligibility, the preview and a proposal show it."""
    instance, gate = ctx.instance, ctx.gate
    return {
        "operation": operation.action,
        "instance": {
            "state": change(instance.state, plan.instance_state or instance.state),
            "revision": change(str(instance.revision), str(instance.revision + 1)),
            "control_revision": change(str(instance.control_revision), str(instance.control_revision + 1)),
            "gate_open": change(gate.open, gate.open if plan.gate_open is None else plan.gate_open),
            "paused": instance.paused,
        },
        **plan.preview(),
    }


def operation_counted(*, operation: str, run: Callable[[], Receipt]) -> Receipt:
    """Count one command of ``operation``, whichever door it came through (its service or a proposal's
    approval): a refusal by its code at once; ``committed``, ``proposed`` or ``replayed`` once the outermost
    transaction commits, so nothing when it is rolled back."""
    try:
        receipt = run()
    except WeaveError as error:
        count(RECOVERY_OPERATIONS, operation, error.code)
        raise
    outcome = "replayed" if receipt.replayed else "proposed" if receipt.status == PROPOSED else "committed"
    transaction.on_commit(lambda: count(RECOVERY_OPERATIONS, operation, outcome))
    return receipt


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
    with log_context(namespace=identity.namespace_id, instance=instance_id):
        return key_retried(
            lambda: _commit(
                operation=operation,
                identity=identity,
                instance_id=instance_id,
                key=idempotency_key,
                fingerprint=fingerprint,
                command=parsed,
                raw=command,
                request_id=request_id,
            )
        )


def key_retried(commit: Callable[[], Receipt]) -> Receipt:
    """One transaction of ``commit``; again when a concurrent request claimed the same key first (it replays)."""
    for _ in range(KEY_RACE_ATTEMPTS):
        try:
            return atomic_with_retry(commit)
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


def key_held(*, locks: LockSet, identity: Identity, key: str, fingerprint: str, operation: str, instance_id: str):
    """The key's row (locked; claimed now when it was free), and its stored receipt when this is a replay."""
    _credential_recheck(locks, identity)
    row = receipt_claim(
        locks=locks,
        namespace_id=identity.namespace_id,
        key=key,
        fingerprint=fingerprint,
        operation=operation,
        instance_id=instance_id,
    )
    if row.response:
        instance = WorkflowInstance.objects.filter(pk=row.workflow_id).first()
        instance_definition_visible(identity=identity, instance=instance)
        return row, receipt_replay(row=row)
    return row, None


def _commit(*, operation, identity, instance_id, key, fingerprint, command, raw, request_id) -> Receipt:
    locks = LockSet()
    row, replay = key_held(
        locks=locks,
        identity=identity,
        key=key,
        fingerprint=fingerprint,
        operation=operation.name,
        instance_id=instance_id,
    )
    if replay is not None:
        return replay
    ctx = context_open(identity=identity, instance_id=instance_id, locks=locks)
    ctx.request_id = request_id
    plan = operation.check(ctx, command)
    if (
        not _rolled_back.get()
        and _approved_decision.get() is None
        and approvals_required(
            namespace_id=ctx.instance.namespace_id, definition_name=ctx.definition.name, operation=operation.name
        )
    ):
        return _propose(ctx, operation, command, raw, plan, row)
    return _apply(ctx, operation, command, plan, row)


def approval_commit(
    *, operations: Mapping[str, "Operation"], identity, instance_id, proposal_id, key, fingerprint, note, request_id
) -> Receipt:
    """The frame of ``operation_execute`` for a proposal's stored command, run by its approver (one transaction):
    key → proposal (NOT_FOUND, decided or expired, the proposer: PERMISSION_DENIED) → instance, whose revision
    must still be the proposal's (ABORTED) → the operation's checks and writes → the proposal APPROVED."""
    locks = LockSet()
    row, replay = key_held(
        locks=locks, identity=identity, key=key, fingerprint=fingerprint, operation=APPROVE, instance_id=instance_id
    )
    if replay is not None:
        return replay
    proposal = proposal_held(locks=locks, identity=identity, instance_id=instance_id, proposal_id=proposal_id)
    approver_check(proposal, identity)
    operation = operations[proposal.operation]
    ctx = context_open(
        identity=identity, instance_id=instance_id, locks=locks, expected_revision=proposal.expected_revision
    )
    ctx.request_id = request_id
    command = operation.command_class.parse(exactjson.loads(proposal.command))
    plan = operation.check(ctx, command)
    return _apply(ctx, operation, command, plan, row, proposal=proposal, note=note)


def _propose(ctx: Context, operation: Operation, command, raw: dict, plan: Plan, row) -> Receipt:
    """Store the checked command as a proposal and answer it (202); nothing of the engine is written."""
    identity, instance = ctx.identity, ctx.instance
    proposal = Proposal.objects.create(
        namespace_id=instance.namespace_id,
        workflow_id=instance.id,
        operation=operation.name,
        command=exactjson.dumps(raw),
        preview=plan_preview(ctx, operation, plan),
        reason=command.reason,
        evidence_ref=command.evidence_ref,
        expected_revision=command.expected_revision,
        proposed_by=identity.actor_id,
        created_at=ctx.now,
        expires_at=proposal_expiry(ctx.now),
    )
    with acting_for(identity):
        audit_write(
            model=WorkflowOperation,
            namespace_id=instance.namespace_id,
            actor_id=identity.actor_id,
            action="workflow.proposal_created",
            reason=command.reason,
            evidence_ref=command.evidence_ref,
            request_id=ctx.request_id,
            before=None,
            after={"proposal": proposal_snapshot(proposal), "preview": proposal.preview},
            now=ctx.now,
            workflow=instance,
        )
    return receipt_freeze(row=row, data=proposal_snapshot(proposal), status=PROPOSED)


def _apply(ctx: Context, operation: Operation, command, plan: Plan, row, *, proposal=None, note="") -> Receipt:
    identity, request_id = ctx.identity, ctx.request_id
    instance, gate = ctx.instance, ctx.gate
    before = instance_snapshot(instance, gate)
    operation_id = new_id()
    # Every event of the operation's writes names its actor and operation.
    with acting_for(identity, operation_id=operation_id, repair=operation.name):
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
            after={
                "instance": instance_snapshot(instance, gate),
                **effect.after,
                **_approved(proposal, identity),
                **({"decision": approval} if (approval := _approved_decision.get()) else {}),
            },
            now=ctx.now,
            workflow=instance,
            operation_id=operation_id,
            step_key=effect.step_key,
            activation=effect.activation,
            execution_audit=effect.execution_audit,
        )
        data = _receipt_data(operation, instance, audit, effect)
        if proposal is not None:
            proposal_close(
                proposal=proposal,
                instance=instance,
                state=ProposalState.APPROVED,
                actor_id=identity.actor_id,
                reason=note,
                request_id=request_id,
                operation_id=operation_id,
            )
            data["proposal_id"] = proposal.id
        receipt = receipt_freeze(row=row, data=data)
        operation.publish(ctx, plan)
    labels = (ctx.definition.name, str(ctx.definition.version), effect.step_key or ROOT_STEP_KEY, operation.name)
    transaction.on_commit(lambda: count(STEP_REPAIRS, *labels))
    return receipt


def _approved(proposal: Proposal | None, approver: Identity) -> dict:
    """Who proposed and who approved an operation run from a proposal, for its audit."""
    if proposal is None:
        return {}
    return {"proposal": {"id": proposal.id, "proposed_by": proposal.proposed_by, "approved_by": approver.actor_id}}


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
