"""The engine's tables, one module per subject, every model and enum importable from here.

Rules that hold for every table here:
- ids are 32 lowercase hex characters in a CharField (never UUIDField);
- relations are ``ForeignKey(db_constraint=False)``: the database holds zero foreign
  keys and the code checks ownership explicitly (a broken relation is corruption);
- client JSON (inputs, outputs, results, payloads) is stored as exact text
  (``core.exactjson``); NULL means absent, the text ``null`` an explicit null.
"""

from history.models.access import Application, Credential, Namespace, Operator, Queue, Scope
from history.models.audit import AuditRecord, ExecutionAudit, IdempotencyReceipt, SignalOperation, WorkflowOperation
from history.models.background import BackgroundProcess, ProcessKind
from history.models.base import Revision, StateFollowed
from history.models.campaigns import CAMPAIGN_OPEN, Campaign, CampaignItem, CampaignState, ItemOutcome
from history.models.notifications import DeliveryState, NotifyWatermark, Webhook, WebhookDelivery, WebhookEvent
from history.models.records import (
    Continuation,
    ContinuationState,
    Disposition,
    InboxRecord,
    InboxSource,
    InboxState,
    Incident,
    InstanceEvent,
    PollRound,
    ResultEvent,
    ResultKind,
    Signal,
    SignalState,
    Wait,
    WaitKind,
    WaitState,
)
from history.models.repairs import RepairCheck, RepairVerdict
from history.models.review import (
    ApprovalPolicy,
    Decision,
    DecisionState,
    Note,
    Proposal,
    ProposalState,
    ReviewAttention,
)
from history.models.signatures import FailureSignature, Stall, StallReason
from history.models.work import (
    TERMINAL_TASK_STATES,
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    Gate,
    InstanceState,
    ReviewCause,
    Step,
    StepKind,
    StepState,
    StopKind,
    Task,
    TaskState,
    WorkflowDefinition,
    WorkflowInstance,
)

__all__ = [
    "RepairCheck",
    "RepairVerdict",
    "CAMPAIGN_OPEN",
    "Campaign",
    "CampaignItem",
    "CampaignState",
    "ItemOutcome",
    "TERMINAL_TASK_STATES",
    "Activation",
    "ActivationState",
    "Application",
    "ApprovalPolicy",
    "Attempt",
    "AttemptState",
    "AuditRecord",
    "BackgroundProcess",
    "Continuation",
    "ContinuationState",
    "Credential",
    "Decision",
    "DeliveryState",
    "DecisionState",
    "Disposition",
    "ExecutionAudit",
    "FailureSignature",
    "Gate",
    "IdempotencyReceipt",
    "InboxRecord",
    "InboxSource",
    "InboxState",
    "Incident",
    "InstanceEvent",
    "InstanceState",
    "Namespace",
    "Note",
    "NotifyWatermark",
    "Operator",
    "PollRound",
    "ProcessKind",
    "Proposal",
    "ProposalState",
    "Queue",
    "ResultEvent",
    "ResultKind",
    "ReviewAttention",
    "ReviewCause",
    "Revision",
    "Scope",
    "Signal",
    "SignalOperation",
    "SignalState",
    "StateFollowed",
    "Step",
    "StepKind",
    "Stall",
    "StallReason",
    "StepState",
    "StopKind",
    "Task",
    "TaskState",
    "Wait",
    "WaitKind",
    "WaitState",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "WorkflowDefinition",
    "WorkflowInstance",
    "WorkflowOperation",
]
