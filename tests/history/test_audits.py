import datetime as dt

from history.audits import audit_write
from history.models import ExecutionAudit, WorkflowOperation
from history.tenancy import namespace_ensure


def test_one_writer_stores_who_what_why_and_the_snapshots_of_any_audit_table(db):
    namespace, _, _ = namespace_ensure(name="acme", application="billing", queues=["payments"])
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    written = audit_write(
        model=ExecutionAudit,
        namespace_id=namespace.id,
        actor_id="a" * 32,
        action="task.review",
        reason="checked the ledger",
        evidence_ref="ticket-7",
        request_id="r" * 32,
        before={"state": "NEEDS_REVIEW"},
        after={"state": "SUCCEEDED"},
        now=at,
        task_id="t" * 32,
        operation_id="o" * 32,
    )
    stored = ExecutionAudit.objects.get(pk=written.pk)
    assert (stored.actor_id, stored.action, stored.reason, stored.evidence_ref) == (
        "a" * 32,
        "task.review",
        "checked the ledger",
        "ticket-7",
    )
    assert (stored.before, stored.after, stored.created_at) == ({"state": "NEEDS_REVIEW"}, {"state": "SUCCEEDED"}, at)
    assert (stored.task_id, stored.operation_id, stored.request_id) == ("t" * 32, "o" * 32, "r" * 32)
    assert not WorkflowOperation.objects.exists()
