"""Typed results of the Weave API, decoded strictly from the response ``data``.

A field with a default is optional (absent in the answer → ``None``); every other field must
be present with its type. Revisions arrive as decimal strings and are ``int`` here; times
are aware UTC ``datetime``; client JSON stays ``RawJSON``. Unknown keys are ignored, so a
newer server stays readable.
"""

import dataclasses
import datetime as dt
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from weave_sdk.errors import WeaveResponseError
from weave_sdk.exactjson import RawJSON

T = TypeVar("T")
REVISION_FIELDS = frozenset({"revision", "control_revision", "expected_revision"})
_REVISION = re.compile(r"[1-9][0-9]{0,19}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z")

model = dataclass(frozen=True, kw_only=True)


@model
class TaskSummary:
    id: str
    state: str
    revision: int
    attempt_count: int
    max_attempts: int


@model
class ActivationItem:
    id: str
    step_id: str
    sequence: int
    state: str
    revision: int
    created_at: dt.datetime
    updated_at: dt.datetime
    task_id: str | None = None
    completed_at: dt.datetime | None = None


@model
class CurrentActivation(ActivationItem):
    task: TaskSummary | None = None


@model
class StepView:
    id: str
    key: str
    kind: str
    state: str
    revision: int
    current_activation_id: str | None = None
    resolution: dict | None = None
    current_activation: CurrentActivation | None = None


@model
class ActivationPage:
    instance_id: str
    revision: int
    step_id: str
    items: list[ActivationItem]
    current_activation_id: str | None = None
    next_cursor: str | None = None


@model
class PollSection:
    first_round: int
    first_round_attempts_used: int
    used_rounds: int
    max_rounds: int
    attempts_per_round: int
    interval_seconds: int
    poll_deadline_at: dt.datetime
    round_deadline_at: dt.datetime
    last_task_id: str | None = None
    next_round_at: dt.datetime | None = None
    last_round_classification: str | None = None


@model
class WaitSection:
    id: str
    kind: str
    generation: int
    state: str
    deadline_at: dt.datetime
    fire_at: dt.datetime | None = None
    winner_signal_id: str | None = None


@model
class ActivationDetail:
    instance_id: str
    revision: int
    step: StepView
    activation: ActivationItem
    input: RawJSON
    # None: no output stored; RawJSON("null"): an explicit null output.
    output: RawJSON | None = None
    poll: PollSection | None = None
    wait: WaitSection | None = None


@model
class PollRound:
    id: str
    activation_id: str
    round: int
    task_id: str
    created_at: dt.datetime


@model
class PollRoundPage:
    instance_id: str
    revision: int
    activation_id: str
    items: list[PollRound]
    next_cursor: str | None = None


@model
class SignalItem:
    id: str
    workflow_id: str
    revision: int
    name: str
    payload_version: str
    target_step_key: str
    target_activation_sequence: int
    state: str
    accepted_at: dt.datetime
    expires_at: dt.datetime
    disposition: str | None = None


@model
class Signal(SignalItem):
    payload: RawJSON
    correlation_key: str
    actor_id: str
    evidence_ref: str | None = None
    consumed_wait_id: str | None = None


@model
class SignalPage:
    workflow_id: str
    revision: int
    items: list[SignalItem]
    next_cursor: str | None = None


@model
class SignalOperationItem:
    id: str
    workflow_id: str
    signal_id: str
    operation_id: str
    actor_id: str
    action: str
    created_at: dt.datetime


@model
class SignalOperation(SignalOperationItem):
    reason: str
    before: RawJSON
    after: RawJSON
    evidence_ref: str | None = None


@model
class SignalOperationPage:
    items: list[SignalOperationItem]
    next_cursor: str | None = None


@model
class WorkflowOperation:
    id: str
    workflow_id: str
    operation_id: str
    actor_id: str
    action: str
    reason: str
    before: RawJSON
    after: RawJSON
    created_at: dt.datetime
    step_key: str | None = None
    activation_id: str | None = None
    execution_audit_id: str | None = None
    evidence_ref: str | None = None


@model
class WorkflowOperationPage:
    workflow_id: str
    revision: int
    items: list[WorkflowOperation]
    next_cursor: str | None = None


@model
class EventSubject:
    type: str
    id: str
    step_key: str | None = None


@model
class EventActor:
    kind: str
    id: str | None = None


@model
class EventLinks:
    """Paths of the detail reads an event leads to; each present only where the subject has one."""

    workflow: str | None = None
    activations: str | None = None
    activation: str | None = None
    task: str | None = None
    signal: str | None = None
    signal_operation: str | None = None
    operations: str | None = None


class EventFilters(typing.TypedDict, total=False):
    """Filters of an instance's timeline: ``kind`` one event kind or several, ``step_key`` a step key or
    ``$root``, ``after_sequence`` only later events, ``order`` asc (default) or desc."""

    kind: str | Sequence[str]
    step_key: str
    after_sequence: int
    order: str


@model
class WorkflowEvent:
    sequence: int
    kind: str
    subject: EventSubject
    actor: EventActor
    reconstructed: bool
    created_at: dt.datetime
    links: EventLinks
    before: str | None = None
    after: str | None = None
    detail: str | None = None
    operation_id: str | None = None
    audit_id: str | None = None
    repair: str | None = None  # the recovery operation that made this change: a state a person produced


@model
class WorkflowEventPage:
    workflow_id: str
    revision: int
    items: list[WorkflowEvent]
    next_cursor: str | None = None


@model
class DefinitionRef:
    name: str
    version: int


@model
class Workflow:
    id: str
    namespace: str
    definition: DefinitionRef
    state: str
    paused: bool
    revision: int
    control_revision: int
    created_at: dt.datetime
    updated_at: dt.datetime
    steps: list[StepView]
    eligibility: dict
    stop_kind: str | None = None
    deadline_at: dt.datetime | None = None
    review_reason: str | None = None
    review_cause: str | None = None  # a stable code while in review, e.g. task_outcome_unknown
    review_step_key: str | None = None  # absent when the cause concerns the whole instance
    review_since: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    # Each step's output by step key, once the instance has succeeded; None before.
    output: RawJSON | None = None


@model
class WorkflowItem:
    """One instance in the instance query: review fields only while it is in review."""

    id: str
    definition: DefinitionRef
    state: str
    paused: bool
    business_key: str
    revision: int
    created_at: dt.datetime
    updated_at: dt.datetime
    review_cause: str | None = None
    review_step_key: str | None = None
    stop_kind: str | None = None
    review_since: dt.datetime | None = None


@model
class WorkflowPage:
    items: list[WorkflowItem]
    next_cursor: str | None = None


@model
class CauseCount:
    review_cause: str
    count: int


@model
class DefinitionCount:
    definition: DefinitionRef
    count: int


@model
class ReviewSummary:
    total: int
    causes: list[CauseCount]
    definitions: list[DefinitionCount]
    definitions_truncated: bool


@model
class Signature:
    """A failure signature: the review reason's pattern (ids, numbers, times, quoted values as ``<*>``) where it
    happened, with its first and last arrival, how many (``knock_on`` of them from instances whose first failure
    was another signature), and how many visible instances are in review with it."""

    id: str
    definition: DefinitionRef
    step_key: str
    review_cause: str
    pattern: str
    sample: str
    first_seen: dt.datetime
    last_seen: dt.datetime
    count: int
    knock_on: int
    in_review: int


@model
class SignaturePage:
    items: list[Signature]
    next_cursor: str | None = None


@model
class CampaignCounts:
    """A campaign's items by outcome."""

    PENDING: int
    APPLIED: int
    SKIPPED: int
    REFUSED: int
    FAILED: int


@model
class CampaignVerification:
    """The verdicts on the repairs of a campaign's applied items."""

    WATCHING: int
    EFFECTIVE: int
    INEFFECTIVE: int
    REGRESSED: int


@model
class CampaignApproval:
    by: str
    at: dt.datetime
    note: str


@model
class CampaignDecision:
    """The decision every item of a campaign makes, as its maker gave it."""

    kind: str
    step_key: str
    reason: str
    evidence_ref: str
    declared: bool
    conclusion: str | None = None
    result: RawJSON | None = None


@model
class Campaign:
    """A repair campaign: one decision (``decision``, as given) over a frozen selection, run server-side — the
    canary first, then widened — with its counts by outcome; under four eyes approved as a whole (``approval``)."""

    id: str
    title: str
    state: str
    source: str
    decision: CampaignDecision
    owner: str
    canary_size: int
    widened: bool
    halt_percent: int
    rate_per_second: int
    halted_reason: str
    four_eyes: bool
    total: int
    counts: CampaignCounts
    verification: CampaignVerification
    created_at: dt.datetime
    approval: CampaignApproval | None = None
    parent_id: str | None = None
    finished_at: dt.datetime | None = None


@model
class CampaignPage:
    items: list[Campaign]
    next_cursor: str | None = None


@model
class CampaignLedgerItem:
    """One item of a campaign's ledger: the instance, the revision it was frozen at, and what became of it."""

    position: int
    workflow_id: str
    revision: int
    outcome: str
    code: str
    detail: str
    decision_id: str | None = None
    done_at: dt.datetime | None = None


@model
class CampaignLedgerPage:
    items: list[CampaignLedgerItem]
    next_cursor: str | None = None


@model
class LateEvidence:
    """What a worker reported after its attempt's lease was lost: recorded, never applied.

    ``attempt_id`` is set in a task's ``late_evidence`` list (an attempt's own evidence is under it).
    """

    event_id: str
    seq: int
    outcome: str
    recorded_at: dt.datetime
    result: RawJSON | None = None
    attempt_id: str | None = None


@model
class TaskLinks:
    """Paths of the reads around one task; ``rounds`` for POLL query tasks only."""

    instance: str
    activation: str
    task: str
    source: str
    rounds: str | None = None


@model
class Attempt:
    id: str
    number: int
    worker: str
    state: str
    started_at: dt.datetime
    lease_expires_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    result: RawJSON | None = None
    late_evidence: LateEvidence | None = None


@model
class Task:
    id: str
    step_key: str
    activation_id: str
    activation_sequence: int
    queue: str
    handler: str
    priority: int
    state: str
    revision: int
    attempt_count: int
    max_attempts: int
    input: RawJSON
    execution_settled: bool
    permit_held: bool
    created_at: dt.datetime
    updated_at: dt.datetime
    attempts: list[Attempt]
    # Every late result event of the task by seq.
    late_evidence: list[LateEvidence]
    links: TaskLinks
    round: int | None = None
    deadline_at: dt.datetime | None = None
    latest_start_at: dt.datetime | None = None
    outcome: str | None = None
    result: RawJSON | None = None
    review_conclusion: str | None = None
    retry_of: str | None = None


@model
class WorkflowTask:
    instance_id: str
    revision: int
    task: Task


@model
class ActivationRef:
    id: str
    sequence: int


@model
class PollRoundRef:
    id: str
    round: int


@model
class TaskSource:
    """Where a task comes from, verified both ways by the server."""

    task_id: str
    namespace: str
    instance_id: str
    definition: DefinitionRef
    step_key: str
    activation: ActivationRef
    queue: str
    links: TaskLinks
    # POLL query tasks only.
    poll_round: PollRoundRef | None = None
    retry_of: str | None = None


@model
class ClaimedTask:
    id: str
    handler: str
    priority: int
    input: RawJSON
    business_key: str
    concurrency_key: str
    revision: int
    attempt_count: int
    max_attempts: int
    round: int | None = None
    deadline_at: dt.datetime | None = None


@model
class ClaimedAttempt:
    id: str
    number: int
    lease_expires_at: dt.datetime


@model
class Claim:
    """A claim's answer: ``claimed`` false (nothing claimable) has no task and no attempt."""

    claimed: bool
    task: ClaimedTask | None = None
    attempt: ClaimedAttempt | None = None


@model
class Heartbeat:
    task_id: str
    attempt_id: str
    lease_expires_at: dt.datetime
    # True: the lease was lost (nothing was extended); the work is no longer wanted, stop it.
    late: bool


@model
class Completion:
    task_id: str
    state: str
    revision: int
    attempt_count: int
    max_attempts: int
    # True: the lease was lost; the result was kept as late evidence and changed nothing. Stop, no error.
    late: bool


@model
class Receipt:
    """The answer of a recovery operation."""

    operation_id: str
    operation: str
    workflow_id: str
    revision: int
    control_revision: int
    state: str
    paused: bool
    execution_operation_id: str | None = None
    step_key: str | None = None
    activation_id: str | None = None
    activation_sequence: int | None = None
    task_id: str | None = None
    # Set when the operation ran as the approval of a proposal.
    proposal_id: str | None = None


@model
class Proposal:
    """A recovery command an approval policy holds for a second person (HTTP 202), or the decision on one."""

    proposal_id: str
    workflow_id: str
    operation: str
    state: str  # PENDING, APPROVED, REJECTED or EXPIRED
    expected_revision: int
    proposed_by: str
    reason: str
    evidence_ref: str
    created_at: dt.datetime
    expires_at: dt.datetime
    decided_by: str
    decided_at: dt.datetime | None = None


@model
class InstanceSummary:
    """The answer of a start, pause, resume or cancel: the instance as that command left it."""

    id: str
    workflow_id: str  # the same as id
    definition: DefinitionRef
    state: str
    paused: bool
    revision: int
    control_revision: int
    business_key: str
    created_at: dt.datetime
    stop_kind: str | None = None
    deadline_at: dt.datetime | None = None


@model
class DecisionStep:
    """One recovery operation a decision ran (or had held as a proposal)."""

    operation: str
    at: dt.datetime
    operation_id: str | None = None
    revision: int | None = None
    state: str | None = None
    proposal_id: str | None = None


@model
class DecisionRefusal:
    """Where a decision's chain stopped and why (``code`` HELD: held as a proposal)."""

    operation: str
    code: str
    message: str


@model
class DecisionApproval:
    """The second person's answer to a decision held under four eyes (or its maker's withdrawal)."""

    outcome: str
    by: str
    at: dt.datetime
    note: str


@model
class Decision:
    """A decision on an instance in review and how far its chain of recovery operations has run; under four eyes
    PROPOSED until a second person approves it (``approval``) before ``expires_at``."""

    id: str
    workflow_id: str
    kind: str
    step_key: str
    state: str
    steps: list[DecisionStep]
    reason: str
    evidence_ref: str
    actor_id: str
    created_at: dt.datetime
    updated_at: dt.datetime
    waiting: str | None = None
    refusal: DecisionRefusal | None = None
    expires_at: dt.datetime | None = None
    approval: DecisionApproval | None = None


@model
class Attention:
    """Who acknowledged the instance's current review (``review_since``) and who is assigned to it."""

    workflow_id: str
    review_since: dt.datetime
    acknowledged_by: str | None = None
    acknowledged_at: dt.datetime | None = None
    assignee: str | None = None
    assigned_by: str | None = None
    assigned_at: dt.datetime | None = None


@model
class Note:
    """An operator's note on an instance, as written (notes are never edited: a later one ``corrects`` it)."""

    id: str
    workflow_id: str
    text: str
    author: str
    created_at: dt.datetime
    evidence_ref: str | None = None
    corrects: str | None = None


@model
class NotePage:
    workflow_id: str
    revision: int
    items: list[Note]
    # The current review's acknowledgement and assignment, absent when there is none.
    attention: Attention | None = None
    next_cursor: str | None = None


@model
class CredentialSelf:
    """Who the bearer token acts as: its scopes, and ``queues`` ``"*"`` (every queue) or their names."""

    credential_id: str
    namespace_id: str
    actor_id: str
    scopes: list[str]
    queues: str | list[str]


@model
class BackgroundProcess:
    """A runner or worker process: ``beat_at`` is when it last finished a pass; ``stale``: not stopped, and that
    beat older than the server's ``stale_after_seconds``."""

    id: str
    kind: str
    host: str
    pid: int
    started_at: dt.datetime
    beat_at: dt.datetime
    age_seconds: int
    stale: bool
    passes: int
    items: int
    queue: str | None = None
    # A clean exit; a killed process has none.
    stopped_at: dt.datetime | None = None


@model
class BackgroundSummary:
    runners_alive: int
    workers_alive: int
    stale: int


@model
class Background:
    processes: list[BackgroundProcess]
    summary: BackgroundSummary
    stale_after_seconds: int


@model
class ApiLinks:
    """Paths on the server: ``docs`` is a page (HTML), ``schema`` the OpenAPI document, the others API reads."""

    docs: str
    schema: str
    workflows: str
    review_summary: str
    credential_self: str


@model
class ApiIndex:
    name: str
    version: str
    links: ApiLinks


@model
class Response:
    """A decoded answer: the typed ``data`` plus what the envelope and headers said."""

    data: Any
    request_id: str
    replayed: bool = False
    status: int = 200


def decode(cls: type[T], value: Any, path: str = "data") -> T:
    """``value`` as an instance of the dataclass ``cls``, or WeaveResponseError naming the path."""
    if not isinstance(value, dict):
        raise _bad(path, "an object")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        name = field.name
        optional = field.default is not dataclasses.MISSING
        if name not in value:
            if not optional:
                raise _bad(f"{path}.{name}", "present")
            continue
        kwargs[name] = _field(hints[name], value[name], f"{path}.{name}", revision=name in REVISION_FIELDS)
    return cls(**kwargs)


def _field(hint: Any, value: Any, path: str, *, revision: bool = False) -> Any:
    if isinstance(hint, types.UnionType):
        *others, hint = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        # Of several shapes the first that fits wins; the last one's refusal names what was expected.
        for other in others:
            try:
                return _field(other, value, path, revision=revision)
            except WeaveResponseError:
                pass
    if typing.get_origin(hint) is list:
        if not isinstance(value, list):
            raise _bad(path, "a list")
        (item,) = typing.get_args(hint)
        return [_field(item, element, f"{path}[{i}]") for i, element in enumerate(value)]
    if hint is RawJSON:
        if not isinstance(value, RawJSON):
            raise _bad(path, "client JSON")
        return value
    if dataclasses.is_dataclass(hint):
        return decode(hint, value, path)
    if revision:
        return decode_revision(value, path)
    if hint is dt.datetime:
        if not isinstance(value, str) or _TIME.fullmatch(value) is None:
            raise _bad(path, "an RFC 3339 UTC time")
        return dt.datetime.fromisoformat(value)
    if hint is int and type(value) is not int:
        raise _bad(path, "an integer")
    if hint is str and isinstance(value, RawJSON):
        # The scanner keeps every ``before``/``after`` raw; where a type holds one as text (an event's
        # states), it is a JSON string.
        value = value.value()
    if hint in (str, bool, dict) and type(value) is not hint:
        raise _bad(path, f"a {hint.__name__}")
    return value


def decode_revision(value: Any, path: str) -> int:
    if not isinstance(value, str) or _REVISION.fullmatch(value) is None or int(value) > 2**64 - 1:
        raise _bad(path, "a revision as a decimal string")
    return int(value)


def _bad(path: str, expected: str) -> WeaveResponseError:
    return WeaveResponseError("BAD_RESPONSE", f"{path} is not {expected}", field=path)
