"""Who did what, why, on which evidence: the shared shape of the audits (``AuditRecord``), the signal,
workflow and execution audits, and the idempotency receipts that replay a committed command's answer.
"""

import datetime as dt

from django.db import models

from core import clock
from core.ids import new_id
from history.models.base import _id_field, _ref


class AuditRecord(models.Model):
    """Shared shape of the three audits: who did what, why, on which evidence, before → after."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    operation_id = models.CharField(max_length=32, default=new_id)
    actor_id = models.CharField(max_length=32)
    action = models.CharField(max_length=32)
    reason = models.CharField(max_length=1024)
    evidence_ref = models.CharField(max_length=512, blank=True)
    request_id = models.CharField(max_length=32, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_id} at {self.created_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


def audit_list_indexes(prefix: str) -> list[models.Index]:
    """What an audit's list reads in order: a namespace's rows newest first, and those of one action (whose
    index also lists the actions there are, one entry each, for the list's filter)."""
    return [
        models.Index(fields=["namespace", "created_at", "id"], name=f"{prefix}_created"),
        models.Index(fields=["namespace", "action", "created_at", "id"], name=f"{prefix}_action"),
    ]


class SignalOperation(AuditRecord):
    """Signal resource audit. ``after`` is the acceptance snapshot and is never rewritten."""

    workflow = _ref("WorkflowInstance", db_index=False)
    signal = _ref("Signal", db_index=False)

    class Meta:
        indexes = [
            models.Index(
                fields=["namespace", "workflow", "signal", "created_at", "id"], name="signal_operation_history"
            ),
            *audit_list_indexes("signal_operation"),
        ]


class WorkflowOperation(AuditRecord):
    workflow = _ref("WorkflowInstance", db_index=False)
    step_key = models.CharField(max_length=64, blank=True)
    activation = _ref("Activation", null=True, db_index=False)
    execution_audit = _ref("ExecutionAudit", null=True, db_index=False)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "workflow", "created_at", "id"], name="workflow_operation_history"),
            *audit_list_indexes("workflow_operation"),
        ]


class ExecutionAudit(AuditRecord):
    task = _ref("Task", db_index=False)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "task", "created_at"], name="execution_audit_task"),
            *audit_list_indexes("execution_audit"),
        ]


class IdempotencyReceipt(models.Model):
    """The frozen answer to a committed command, replayed for the same key and command."""

    id = _id_field()
    namespace = _ref("Namespace", db_index=False)
    key = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    operation = models.CharField(max_length=32)
    workflow = _ref("WorkflowInstance", null=True, db_index=False)
    status_code = models.PositiveSmallIntegerField(default=200)
    response = models.TextField()
    created_at = models.DateTimeField(default=clock.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["namespace", "key"], name="receipt_ns_key")]

    def __str__(self) -> str:
        return f"{self.operation} receipt {self.key}"
