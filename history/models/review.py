"""What people decide and say about an instance: the approval policies, the proposals held for a second
person's approval with their states, operators' notes, and who has seen and who is on a review.
"""

from django.db import models

from core import clock
from history.models.base import _exact_json, _id_field, _ref


class ApprovalPolicy(models.Model):
    """How many approvals a recovery operation needs before it runs (0 or 1); the most specific row wins:
    definition and operation, then definition, then operation, then the namespace's blank row. None: 0."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    definition_name = models.CharField(max_length=128, blank=True, help_text="blank: every definition")
    operation = models.CharField(max_length=32, blank=True, help_text="an operation's API name; blank: every one")
    approvals_required = models.PositiveSmallIntegerField(default=1, choices=[(0, "0"), (1, "1")])

    class Meta:
        verbose_name_plural = "approval policies"
        constraints = [
            models.UniqueConstraint(fields=["namespace", "definition_name", "operation"], name="policy_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.definition_name or 'any definition'} / {self.operation or 'any operation'}"


class ProposalState(models.TextChoices):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


class Proposal(models.Model):
    """A recovery command held for a second person's approval: exactly as submitted, with its preview.

    Approval runs ``command`` through the operation's pipeline, whose revision checks make a proposal
    stale once anything it was checked against has moved. Decisions are also in the workflow audit.
    """

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    operation = models.CharField(max_length=32)
    command = _exact_json(null=False)
    preview = models.JSONField()
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    expected_revision = models.PositiveBigIntegerField()
    proposed_by = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=ProposalState.choices, default=ProposalState.PENDING)
    created_at = models.DateTimeField(default=clock.now)
    expires_at = models.DateTimeField()
    decided_by = models.CharField(max_length=32, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.CharField(max_length=1024, blank=True)
    # The workflow audit of the approved operation's effect.
    operation_id = models.CharField(max_length=32, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workflow", "state"], name="proposal_workflow_state"),
            models.Index(fields=["state", "expires_at"], name="proposal_state_expires"),
        ]


class DecisionState(models.TextChoices):
    RUNNING = "RUNNING"  # steps still to run, now or once the background has taken in the last one
    SUCCEEDED = "SUCCEEDED"  # its last step took the instance out of review
    REFUSED = "REFUSED"  # a step was refused: ``refusal`` says which and why; the steps before it stand
    HELD = "HELD"  # a step was held for a second person's approval (``refusal`` names the proposal)
    # Under a four-eyes policy the whole decision waits for a second person before any step runs:
    PROPOSED = "PROPOSED"  # nothing has run; a second person approves (RUNNING) or rejects it, until expires_at
    REJECTED = "REJECTED"  # rejected (or withdrawn by its proposer): nothing ran
    EXPIRED = "EXPIRED"  # nobody approved it before expires_at: nothing ran


class Decision(models.Model):
    """One decision an operator states about an instance in review (``recovery.decisions``), run as the chain of
    recovery operations it stands for: each step an operation of its own, with its own revisions, idempotency
    key (``decision-<id>-<n>``) and audit; the chain goes on as the background takes in each step.

    It acts as the person who made it (``actor_id``, ``scopes``, ``queue_access``, ``credential_id``): a step the
    background runs later is refused if that credential has been revoked since.
    """

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    kind = models.CharField(max_length=32)
    # The operator's command as sent (exact JSON: a result keeps its exact text).
    command = _exact_json(null=False)
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    actor_id = models.CharField(max_length=32)
    scopes = models.JSONField(default=list)
    queue_access = models.JSONField(default=list)
    credential_id = models.CharField(max_length=32, blank=True)
    request_id = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=16, choices=DecisionState.choices, default=DecisionState.RUNNING)
    # The operations run, in order: {"operation", "operation_id", "revision", "state", "at"}.
    steps = models.JSONField(default=list)
    # While RUNNING: what the next step waits for ("" when nothing). Once REFUSED or HELD: why, and where.
    waiting = models.CharField(max_length=256, blank=True)
    refusal = models.JSONField(null=True, blank=True)
    # A driver (the request that made it, or a runner pass) holds it until then: one driver at a time.
    lease_until = models.DateTimeField(null=True, blank=True)
    # A PROPOSED decision's deadline, and the second person's answer: {"outcome", "by", "at", "note"}.
    expires_at = models.DateTimeField(null=True, blank=True)
    approval = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [
            models.Index(fields=["workflow", "created_at"], name="decision_workflow"),
            models.Index(fields=["state", "lease_until"], name="decision_state_lease"),
            models.Index(fields=["state", "expires_at"], name="decision_state_expires"),
        ]


class Note(models.Model):
    """What an operator says about an instance: append-only; a correction is a new note naming the one it
    corrects. Notes never change the engine's state or revisions."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    workflow = _ref("WorkflowInstance", db_index=False)
    text = models.TextField()
    evidence_ref = models.CharField(max_length=512, blank=True)
    author = models.CharField(max_length=32)
    corrects = _ref("Note", null=True, db_index=False)
    request_id = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        indexes = [models.Index(fields=["namespace", "workflow", "created_at", "id"], name="note_history")]


class ReviewAttention(models.Model):
    """Who has seen an instance's current review and who is on it; kept apart from the engine's state.

    ``review_since`` names the review it belongs to: when the instance leaves review and comes back,
    the row no longer matches and the new review starts unacknowledged and unassigned.
    """

    instance = models.OneToOneField(
        "WorkflowInstance", on_delete=models.DO_NOTHING, db_constraint=False, primary_key=True, related_name="+"
    )
    review_since = models.DateTimeField()
    acknowledged_by = models.CharField(max_length=32, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    assignee = models.CharField(max_length=32, blank=True)
    assigned_by = models.CharField(max_length=32, blank=True)
    assigned_at = models.DateTimeField(null=True, blank=True)
