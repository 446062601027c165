"""The workflow audit (WorkflowOperation): recovery, start and control decisions."""

from dataclasses import dataclass

from core.identity import Identity
from history.models import WorkflowInstance, WorkflowOperation
from history.selectors.access import instance_get_readable
from history.selectors.pagination import ListKind, Page, keyset_page

WORKFLOW_OPERATIONS = ListKind("workflow_operations", WorkflowOperation, ("created_at", "id"))


@dataclass(frozen=True)
class WorkflowOperationPage:
    instance: WorkflowInstance
    page: Page[WorkflowOperation]


def workflow_operation_list(
    *, identity: Identity, instance_id: str, after: tuple | None, limit: int
) -> WorkflowOperationPage:
    """The workflow's audit records, newest first (created_at, id)."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    queryset = WorkflowOperation.objects.filter(namespace_id=instance.namespace_id, workflow_id=instance.id)
    return WorkflowOperationPage(
        instance=instance, page=keyset_page(queryset, kind=WORKFLOW_OPERATIONS, after=after, limit=limit)
    )
