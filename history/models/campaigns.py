"""Repair campaigns: one decision applied to a selection of instances frozen when the campaign was made, run by the
background item by item with a ledger of what became of each (``recovery.campaigns``)."""

from django.db import models

from core import clock
from history.models.base import _exact_json, _id_field, _ref


class CampaignState(models.TextChoices):
    # Under a four-eyes policy that covers its decision: a second person approves it (READY) with its preview.
    PROPOSED = "PROPOSED"
    READY = "READY"  # made and previewed: nothing has run; its owner starts it
    RUNNING = "RUNNING"  # the background takes its items, the canary's first
    CANARY_DONE = "CANARY_DONE"  # every canary item ran: someone reads the canary's ledger and widens it
    PAUSED = "PAUSED"
    HALTED = "HALTED"  # it stopped itself: too many items refused or failed (``halted_reason``)
    CANCELLED = "CANCELLED"
    DONE = "DONE"  # every item ran


# The states it may still run from (resumed, widened or started).
CAMPAIGN_OPEN = (
    CampaignState.PROPOSED,
    CampaignState.READY,
    CampaignState.RUNNING,
    CampaignState.CANARY_DONE,
    CampaignState.PAUSED,
    CampaignState.HALTED,
)


class ItemOutcome(models.TextChoices):
    PENDING = "PENDING", "not run yet"
    APPLIED = "APPLIED", "the decision was made: its receipt is the decision"
    SKIPPED = "SKIPPED", "the instance moved since the selection was frozen, or the campaign was cancelled"
    REFUSED = "REFUSED", "a rule refused the decision"
    FAILED = "FAILED", "an error the rules do not name"


class Campaign(models.Model):
    """One decision (``recovery.decisions.KINDS``: its kind, step, outcome, reason, evidence) for every instance of
    a frozen selection. It runs as the person who made it (``actor_id``, ``scopes``, ``queue_access``,
    ``credential_id``), the first ``canary_size`` items first; it halts itself once more than ``halt_percent`` of
    the items run are refused or failed, and takes at most ``rate_per_second`` items a second."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    title = models.CharField(max_length=200)
    # How the selection was made, in the operator's words ("failure signature …", "12 pasted lines", a list filter).
    source = models.CharField(max_length=1024)
    # The decision's command without the instance's revision: each item carries the revision it was frozen at.
    kind = models.CharField(max_length=32)
    step_key = models.CharField(max_length=64)
    command = _exact_json(null=False)
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    actor_id = models.CharField(max_length=32)
    owner = models.CharField(max_length=150)
    scopes = models.JSONField(default=list)
    queue_access = models.JSONField(default=list)
    # Every queue of the selection's definitions, sorted: who may see all of them may see the campaign.
    queues = models.JSONField(default=list)
    credential_id = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=16, choices=CampaignState.choices, default=CampaignState.READY)
    canary_size = models.PositiveIntegerField()
    # Whether the canary has been widened past: from then on every pending item may run.
    widened = models.BooleanField(default=False)
    halt_percent = models.PositiveSmallIntegerField()
    rate_per_second = models.PositiveIntegerField()
    halted_reason = models.CharField(max_length=1024, blank=True)
    # When it last halted itself (kept once resumed): the notifier's ``campaign.halted`` reads it.
    halted_at = models.DateTimeField(null=True, blank=True)
    # A four-eyes policy covers its decision for some instance of it: approved as a whole by a second person
    # (``approval``: {"by", "at", "note"}), who also widens it past its canary; its items run unheld.
    four_eyes = models.BooleanField(default=False)
    approval = models.JSONField(null=True, blank=True)
    total = models.PositiveIntegerField(default=0)
    # "Again for the failed and skipped": the campaign this one re-runs the items of.
    parent = _ref("Campaign", null=True, db_index=False)
    # Who did what to it and when, oldest first: {"at", "by", "action", "note"} (made, started, paused, halted, …).
    log = models.JSONField(default=list)
    # An executor holds it until then: one executor at a time takes its items.
    lease_until = models.DateTimeField(null=True, blank=True)
    # Items taken so far since the last start or resume, and when it began: the rate limit's allowance.
    paced_since = models.DateTimeField(null=True, blank=True)
    paced_items = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=clock.now)
    updated_at = models.DateTimeField(default=clock.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "created_at", "id"], name="campaign_ns_created"),
            models.Index(fields=["state", "lease_until"], name="campaign_state_lease"),
            models.Index(fields=["halted_at", "id"], name="campaign_halted"),
        ]

    def __str__(self) -> str:
        return self.title


class CampaignItem(models.Model):
    """One instance of a campaign's frozen selection: the revision it was frozen at and what became of it."""

    id = _id_field()
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, db_constraint=False, related_name="items")
    # Its place in the selection: the canary is the first ``canary_size``.
    position = models.PositiveIntegerField()
    instance = _ref("WorkflowInstance", db_index=False)
    revision = models.PositiveBigIntegerField()
    outcome = models.CharField(max_length=8, choices=ItemOutcome.choices, default=ItemOutcome.PENDING)
    # REFUSED / FAILED: the error's code; SKIPPED: the instance's state then.
    code = models.CharField(max_length=64, blank=True)
    detail = models.CharField(max_length=1024, blank=True)
    decision = _ref("Decision", null=True, db_index=False)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "instance"], name="campaign_item_instance"),
            models.UniqueConstraint(fields=["campaign", "position"], name="campaign_item_position"),
        ]
        # The next items to run, and the ledger by outcome, each in selection order.
        indexes = [models.Index(fields=["campaign", "outcome", "position"], name="campaign_item_outcome")]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.outcome}"
