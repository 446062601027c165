"""The one writer of audit rows: workflow operations, execution audits and signal operations.

Every audit states who (actor), what (action, on the row named by ``target``), why (reason and
evidence), in which request, and the before → after snapshots; it is written in the same
transaction as the change it records and never rewritten.
"""

import datetime as dt
from typing import TypeVar

from history.models import AuditRecord

Audit = TypeVar("Audit", bound=AuditRecord)


def audit_write(
    *,
    model: type[Audit],
    namespace_id: str,
    actor_id: str,
    action: str,
    reason: str,
    before: dict | None,
    after: dict | None,
    now: dt.datetime,
    evidence_ref: str = "",
    request_id: str = "",
    **target: object,
) -> Audit:
    """Save one audit row of ``model``; ``target`` names what it is about (workflow, task, signal, …)."""
    return model.objects.create(
        namespace_id=namespace_id,
        actor_id=actor_id,
        action=action,
        reason=reason,
        evidence_ref=evidence_ref,
        request_id=request_id,
        before=before,
        after=after,
        created_at=now,
        **target,
    )
