"""Decisions: what an operator established about an instance in review, stated once and run as the chain of
recovery operations the seeds require for it.

A decision names its kind (``KINDS``: what the operator established), the step it is about, the outcome where the
kind has one, a reason, evidence and one declaration that covers every operation of the chain. It is checked and
stored in one transaction (``decision_make``: the instance must still be at the revision the operator saw), then
driven (``decision_drive``): each step is the operation the kind allows that is possible now — Continue first once
the outcome has been applied and nothing else is left — run through that operation's own service, so each step
has its own checks, revisions, idempotency key (``decision-<id>-<n>``), transaction and audit. When no step is
possible because the runner has not yet taken in the last one, the decision waits; a runner pass drives it again
(``pass_decisions``, registered with the runner's passes by ``recovery.apps``). A refused step ends the chain,
naming the operation and the rule; a step held for a second person's approval ends it as HELD.

Under a four-eyes policy that covers any operation of its chain, a decision is stored PROPOSED and nothing runs:
a second person approves it (``decision_approve``: the instance must still be at the revision it was made on; its
steps then run unheld, each audited with the approval) or rejects it (``decision_reject``; its maker may withdraw
it); a runner pass expires it at ``expires_at``.

A driver holds the decision by a lease, so the request that made it and the runner never drive it at once; a
driver killed between a step's commit and its record finds the step's receipt under its key and records it.
"""

import contextlib
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.db.models import QuerySet

from core import clock, exactjson
from core import fields as field_rules
from core.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, WeaveError
from core.identity import Identity, identity_of_stored, identity_stored
from core.logs import log_context
from core.times import format_time
from history import idempotency
from history.audits import audit_write
from history.events import acting_for
from history.idempotency import receipt_freeze, receipt_replay
from history.locking import Level, LockSet, lease_take
from history.models import (
    Decision,
    DecisionState,
    IdempotencyReceipt,
    InboxRecord,
    InboxState,
    InstanceState,
    Scope,
    Step,
    Task,
    TaskState,
    WorkflowInstance,
    WorkflowOperation,
)
from history.proposals import approvals_required, proposal_expiry
from history.selectors.access import instance_get_readable
from recovery.commands import CONCLUSIONS, instance_id_check
from recovery.context import context_open
from recovery.eligibility import operations_judged
from recovery.operations import OPERATIONS
from recovery.pipeline import PROPOSED, approved_decision, key_held, key_retried

log = logging.getLogger("weave.decisions")

DECIDE = "decide"
APPROVE = "decision.approve"
REJECT = "decision.reject"
LEASE = dt.timedelta(seconds=60)
BATCH = 50
# A chain is a few operations; a decision that would run more has met a loop, not a recovery.
MAX_STEPS = 8


@dataclass(frozen=True)
class Kind:
    """What an operator established, and the operations that carry it out, in the order they are tried."""

    name: str
    title: str
    established: str  # what the operator asserts, in the console's and the API's words
    operations: tuple[str, ...]
    # The outcome fields the operator gives: "conclusion" and "result", or "result" alone (a poll's answer).
    outcome: tuple[str, ...] = ()


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            "conclude",
            "The work ended this way",
            "the step's external work has ended, with this conclusion and result, and will have no further effect",
            ("review-task", "resolve-step", "continue"),
            outcome=("conclusion", "result"),
        ),
        Kind(
            "keep-polling",
            "The answer is still pending",
            "the external work is still pending: this is its answer, and the poll should go on",
            ("review-task", "continue-poll", "continue"),
            outcome=("result",),
        ),
        Kind(
            "retry",
            "Safe to run again",
            "the step's earlier executions have ended without effect and running it again is safe",
            ("retry-step", "continue"),
        ),
        Kind(
            "rearm",
            "Wait for a valid signal",
            "the wait's signals were checked and the step should wait again for a valid one",
            ("rearm-wait", "continue"),
        ),
    )
}

_FIELDS = ("kind", "step_key", "expected_revision", "reason", "evidence_ref", "declared", "conclusion", "result")


@dataclass(frozen=True)
class DecisionCommand:
    kind: Kind
    step_key: str
    expected_revision: int
    reason: str
    evidence_ref: str
    conclusion: str | None
    result: object


def decision_command_parse(raw: object) -> DecisionCommand:
    """Every field checked before anything is read; INVALID_ARGUMENT names the first one wrong."""
    command = field_rules.command_object(raw, allowed=_FIELDS)
    name = field_rules.choice("kind", field_rules.required(command, "kind"), tuple(KINDS))
    kind = KINDS[name]
    rules = {
        "step_key": field_rules.step_key,
        "expected_revision": field_rules.revision,
        "reason": field_rules.reason,
        "evidence_ref": field_rules.token,
    }
    values = {field: rule(field, field_rules.required(command, field)) for field, rule in rules.items()}
    field_rules.declaration("declared", field_rules.required(command, "declared"))
    for field in ("conclusion", "result"):
        if field not in kind.outcome and field in command:
            raise InvalidArgument(f"{field}: a {name} decision has no {field}", field=field)
    conclusion = None
    if "conclusion" in kind.outcome:
        conclusion = field_rules.choice("conclusion", field_rules.required(command, "conclusion"), CONCLUSIONS)
    result = None
    if "result" in kind.outcome:
        field_rules.json_text("result", field_rules.required(command, "result"))
        result = command["result"]
    return DecisionCommand(kind=kind, conclusion=conclusion, result=result, **values)


def decision_make(
    *,
    identity: Identity,
    instance_id: str,
    idempotency_key: str,
    command: dict,
    request_id: str = "",
    approval: dict | None = None,
):
    """Check and store a decision (one transaction), then drive it as far as it goes now; the decision. With
    ``approval`` (a repair campaign's, approved as a whole: {"outcome", "by", "at", "note"}) it runs unheld."""
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    idempotency.key_check(idempotency_key)
    parsed = decision_command_parse(command)
    fingerprint = idempotency.fingerprint(operation=DECIDE, target=instance_id, command=command)

    def commit():
        locks = LockSet()
        row, replay = key_held(
            locks=locks,
            identity=identity,
            key=idempotency_key,
            fingerprint=fingerprint,
            operation=DECIDE,
            instance_id=instance_id,
        )
        if replay is not None:
            return replay
        instance = decision_subject(identity=identity, instance_id=instance_id, parsed=parsed)
        ctx = context_open(identity=identity, instance_id=instance_id, locks=None)
        # Four eyes cover the whole chain: any of its operations under a policy holds the decision back.
        held = approval is None and any(
            approvals_required(namespace_id=identity.namespace_id, definition_name=ctx.definition.name, operation=name)
            for name in parsed.kind.operations
        )
        decision = Decision.objects.create(
            state=DecisionState.PROPOSED if held else DecisionState.RUNNING,
            expires_at=proposal_expiry(ctx.now) if held else None,
            namespace_id=identity.namespace_id,
            workflow_id=instance_id,
            kind=parsed.kind.name,
            command=exactjson.dumps(command),
            reason=parsed.reason,
            evidence_ref=parsed.evidence_ref,
            **identity_stored(identity),
            request_id=request_id,
            approval=approval,
        )
        if held:
            _audit(decision, instance, identity, "workflow.decision_proposed", reason=parsed.reason, before=None)
        return receipt_freeze(row=row, data={"decision_id": decision.id}, status=201)

    with log_context(namespace=identity.namespace_id, instance=instance_id):
        receipt = key_retried(commit)
        decision_id = receipt.data["decision_id"]
        decision_drive(decision_id)
    return Decision.objects.get(pk=decision_id), receipt


def decision_subject(*, identity: Identity, instance_id: str, parsed: DecisionCommand) -> WorkflowInstance:
    """The instance a decision is about, as the operator saw it: a view the instance has left is refused first,
    naming what moved it (a second tab, a colleague); a step it does not have is NOT_FOUND."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    if instance.revision != parsed.expected_revision:
        raise Aborted(_moved(instance, parsed.expected_revision))
    if not Step.objects.filter(instance_id=instance_id, key=parsed.step_key).exists():
        raise NotFound(f"step_key: the instance has no step {parsed.step_key!r}", field="step_key")
    return instance


def decision_approve(
    *, identity: Identity, instance_id: str, decision_id: str, idempotency_key: str, command: object, request_id=""
):
    """A second person's approval of a PROPOSED decision: its chain runs now, each step unheld and audited with
    the approval (not by its maker; the instance must not have moved since it was made); the decision."""
    return _answer(APPROVE, identity, instance_id, decision_id, idempotency_key, command, request_id)


def decision_reject(
    *, identity: Identity, instance_id: str, decision_id: str, idempotency_key: str, command: object, request_id=""
):
    """Close a PROPOSED decision unrun, with a reason (its maker may withdraw it so); the decision."""
    return _answer(REJECT, identity, instance_id, decision_id, idempotency_key, command, request_id)


def _answer(action: str, identity: Identity, instance_id: str, decision_id: str, key: str, command, request_id: str):
    identity.require_scope(Scope.RECOVER)
    instance_id_check(instance_id)
    field_rules.identifier("decision_id", decision_id)
    idempotency.key_check(key)
    given = field_rules.command_object(command, allowed=("reason",))
    note = ""
    if "reason" in given or action == REJECT:
        note = field_rules.reason("reason", field_rules.required(given, "reason"))
    fingerprint = idempotency.fingerprint(operation=action, target=decision_id, command=given)

    def commit():
        locks = LockSet()
        row, replay = key_held(
            locks=locks, identity=identity, key=key, fingerprint=fingerprint, operation=action, instance_id=instance_id
        )
        if replay is not None:
            return replay
        instance_get_readable(identity=identity, instance_id=instance_id)
        # The decision is locked in the proposal's place of the fixed order: after the key, before the instance.
        decision = Decision.objects.select_for_update().filter(pk=decision_id, workflow_id=instance_id).first()
        if decision is None:
            raise NotFound("decision_id: no such decision of this workflow", field="decision_id")
        if decision.state != DecisionState.PROPOSED:
            raise FailedPrecondition(f"the decision is {decision.state}: {_answered(decision)}")
        now = clock.now()
        if decision.expires_at <= now:
            raise FailedPrecondition(f"the decision expired at {format_time(decision.expires_at)}; decide again")
        instance = locks.lock_one(Level.INSTANCE, instance_id)
        if action == APPROVE:
            if decision.actor_id == identity.actor_id:
                raise PermissionDenied("a decision under four eyes needs a second person: its maker cannot approve it")
            seen = decision_command_parse(exactjson.loads(decision.command)).expected_revision
            if instance.revision != seen:
                raise Aborted(_moved(instance, seen, since="it was made", then="nothing ran; decide again"))
        before = _snapshot(decision)
        decision.state = DecisionState.RUNNING if action == APPROVE else DecisionState.REJECTED
        outcome = "APPROVED" if action == APPROVE else "REJECTED"
        decision.approval = {"outcome": outcome, "by": identity.actor_id, "at": format_time(now), "note": note}
        decision.updated_at = now
        decision.save(update_fields=["state", "approval", "updated_at"])
        _audit(decision, instance, identity, f"workflow.decision_{outcome.lower()}", reason=note, before=before)
        return receipt_freeze(row=row, data={"decision_id": decision.id})

    with log_context(namespace=identity.namespace_id, instance=instance_id):
        receipt = key_retried(commit)
        if action == APPROVE:
            decision_drive(decision_id)
    return Decision.objects.get(pk=decision_id), receipt


def _answered(decision: Decision) -> str:
    """Who already answered a decision that is no longer waiting, and when; or that it never waited."""
    if decision.approval:
        answer = decision.approval
        return f"{answer['outcome'].lower()} by {answer['by']} at {answer['at']}"
    if decision.state == DecisionState.EXPIRED:
        return f"nobody approved it before {format_time(decision.expires_at)}"
    return "it was never held for approval"


def _snapshot(decision: Decision) -> dict:
    return {
        "id": decision.id,
        "kind": decision.kind,
        "state": decision.state,
        "made_by": decision.actor_id,
        "expires_at": format_time(decision.expires_at) if decision.expires_at else None,
        "approval": decision.approval,
    }


def _audit(decision: Decision, instance, identity: Identity, action: str, *, reason: str, before) -> None:
    with acting_for(identity):
        audit_write(
            model=WorkflowOperation,
            namespace_id=decision.namespace_id,
            actor_id=identity.actor_id,
            action=action,
            reason=reason,
            evidence_ref=decision.evidence_ref if action == "workflow.decision_proposed" else "",
            request_id=decision.request_id,
            before=None if before is None else {"decision": before},
            after={"decision": _snapshot(decision)},
            now=decision.updated_at,
            workflow=instance,
        )


def decision_get(*, identity: Identity, instance_id: str, decision_id: str) -> Decision:
    """A decision about an instance the caller may read; NOT_FOUND names ``decision_id`` otherwise."""
    identity.require_scope(Scope.READ, Scope.RECOVER)
    instance = instance_get_readable(identity=identity, instance_id=instance_id_check(instance_id))
    found = Decision.objects.filter(pk=field_rules.identifier("decision_id", decision_id), workflow_id=instance.id)
    decision = found.first()
    if decision is None:
        raise NotFound("decision_id: no such decision of this workflow", field="decision_id")
    return decision


def _moved(instance: WorkflowInstance, seen: int, *, since="you looked", then="look again before you decide") -> str:
    """Why a decision on an older view is refused: what moved the instance since, by whom and when."""
    message = f"the instance moved since {since}: revision {seen} → {instance.revision}"
    last = WorkflowOperation.objects.filter(workflow_id=instance.id).order_by("-created_at", "-id").first()
    if last is not None:
        message += f"; the last operation was {last.action} by {last.actor_id} at {last.created_at.isoformat()}"
    return f"{message}; {then}"


def decision_drive(decision_id: str) -> bool:
    """Run the decision's next steps until it ends or waits for the background; whether it took a step or ended
    (False too when another driver holds it, or it is not RUNNING)."""
    decision = lease_take(Decision, decision_id, state=DecisionState.RUNNING, lease=LEASE)
    if decision is None:
        return False
    identity = identity_of_stored(decision)
    parsed = decision_command_parse(exactjson.loads(decision.command))
    moved = False
    approval = decision.approval or {}
    covered = {"id": decision.id, "made_by": decision.actor_id, "approved_by": approval.get("by")}
    try:
        with approved_decision(covered) if approval else contextlib.nullcontext():
            while decision.state == DecisionState.RUNNING and _step(decision, identity, parsed):
                moved = True
    finally:
        _save(decision, lease_until=None)
    return moved


def _save(decision: Decision, **changes) -> None:
    for name, value in changes.items():
        setattr(decision, name, value)
    decision.updated_at = clock.now()
    Decision.objects.filter(pk=decision.pk).update(
        state=decision.state,
        steps=decision.steps,
        waiting=decision.waiting,
        refusal=decision.refusal,
        lease_until=decision.lease_until,
        updated_at=decision.updated_at,
    )


def _step(decision: Decision, identity: Identity, parsed: DecisionCommand) -> bool:
    """One step: record a step a killed driver ran, or end, or run the next operation; False when it waits."""
    number = len(decision.steps) + 1
    key = f"decision-{decision.id}-{number}"
    ran = IdempotencyReceipt.objects.filter(namespace_id=decision.namespace_id, key=key).exclude(response="").first()
    if ran is not None:
        _record(decision, ran.operation, receipt_replay(row=ran))
        return True
    instance = WorkflowInstance.objects.get(pk=decision.workflow_id)
    if decision.steps and instance.state != InstanceState.NEEDS_REVIEW:
        _save(decision, state=DecisionState.SUCCEEDED, waiting="")
        return True
    if len(decision.steps) >= MAX_STEPS:
        _refuse(decision, "", FailedPrecondition(f"the decision ran {MAX_STEPS} steps without ending the review"))
        return True
    try:
        name, command = decision_next_step(identity, parsed, instance, started=bool(decision.steps))
    except DecisionWaiting as waiting:
        _save(decision, waiting=str(waiting))
        return False
    except WeaveError as error:
        _refuse(decision, "", error)
        return True
    try:
        receipt = OPERATIONS[name].service(
            identity=identity,
            instance_id=decision.workflow_id,
            idempotency_key=key,
            command=command,
            request_id=decision.request_id,
        )
    except WeaveError as error:
        _refuse(decision, name, error)
        return True
    _record(decision, name, receipt)
    return True


def _record(decision: Decision, name: str, receipt) -> None:
    data = receipt.data
    step = {"operation": name, "at": format_time(clock.now())}
    if receipt.status == PROPOSED:
        step["proposal_id"] = data["id"]
        refusal = {"operation": name, "code": "HELD", "message": "held for a second person's approval"}
        _save(decision, steps=[*decision.steps, step], state=DecisionState.HELD, refusal=refusal, waiting="")
        return
    step |= {"operation_id": data["operation_id"], "revision": data["revision"], "state": data["state"]}
    _save(decision, steps=[*decision.steps, step], waiting="")


def _refuse(decision: Decision, name: str, error: WeaveError) -> None:
    refusal = {"operation": name, "code": error.code, "message": error.message}
    _save(decision, state=DecisionState.REFUSED, refusal=refusal, waiting="")
    log.info("decision %s refused at step %s (%s): %s", decision.id, len(decision.steps) + 1, name, error.message)


class DecisionWaiting(Exception):
    """No step is possible until the background takes in the last one."""


def decision_next_step(identity: Identity, parsed: DecisionCommand, instance: WorkflowInstance, *, started: bool):
    """The operation to run now and its command, judged by the operations' own eligibility (``started``: a step
    of the decision ran already); FAILED_PRECONDITION when none is possible, ``DecisionWaiting`` while the
    background has the last step's result to take in."""
    if InboxRecord.objects.filter(instance_id=instance.id, state=InboxState.PENDING).exists():
        raise DecisionWaiting("the runner takes in the last step's result")
    kind = parsed.kind
    # Continue once the outcome has been applied and it is possible; before, the outcome's own operations, and
    # Continue judged last only to say why it is not yet for this decision.
    order = [n for n in kind.operations if n != "continue"]
    if started:
        order.insert(0, "continue")
    judged = [*order, "continue"] if not started and "continue" in kind.operations else order
    refusals = {}
    for name, entry in operations_judged(identity=identity, instance=instance, step_key=parsed.step_key, names=judged):
        if entry["possible"] and name in order:
            return name, _command(name, entry, parsed, instance)
        refusals[name] = entry.get("reason", "not before the outcome is applied")
    raise FailedPrecondition(
        "no operation of this decision is possible now: "
        + "; ".join(f"{OPERATIONS[name].title}: {why}" for name, why in refusals.items())
    )


def _command(name: str, entry: Mapping, parsed: DecisionCommand, instance: WorkflowInstance) -> dict:
    """The operation's command from the decision: the revisions read now, the declaration the operator made."""
    operation = OPERATIONS[name]
    command = {
        "expected_revision": str(instance.revision),
        "reason": parsed.reason,
        "evidence_ref": parsed.evidence_ref,
        operation.declaration: True,
    }
    if operation.target == "task":
        task = Task.objects.get(pk=entry["task_id"], state=TaskState.NEEDS_REVIEW)
        command |= {"task_id": task.id, "expected_task_revision": str(task.revision)}
    elif operation.target == "step":
        step = Step.objects.get(instance_id=instance.id, key=parsed.step_key)
        command |= {
            "step_key": step.key,
            "activation_id": step.current_activation_id,
            "expected_step_revision": str(step.revision),
        }
    if operation.with_conclusion:
        command |= {"conclusion": parsed.conclusion or "SUCCEEDED", "result": parsed.result}
    return command


def decisions_due(now: dt.datetime) -> tuple[QuerySet, QuerySet]:
    """What ``pass_decisions`` handles: the PROPOSED decisions past their expiry, the RUNNING ones no driver holds."""
    return (
        Decision.objects.filter(state=DecisionState.PROPOSED, expires_at__lte=now),
        Decision.objects.filter(state=DecisionState.RUNNING).exclude(lease_until__gt=now),
    )


def pass_decisions() -> int:
    """A runner pass: expire the PROPOSED decisions nobody approved in time, and drive the running ones no driver
    holds (those waiting on the background); how many took a step or ended."""
    now = clock.now()
    lapsed, unheld = decisions_due(now)
    expired = lapsed.update(state=DecisionState.EXPIRED, updated_at=now)
    ids = unheld.order_by("updated_at").values_list("id", flat=True)[:BATCH]
    return expired + sum(decision_drive(decision_id) for decision_id in list(ids))
