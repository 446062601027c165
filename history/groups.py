"""The console's four groups and what each may do; kept in sync after every migrate."""

from django.contrib.auth.models import Group, Permission

AUDIT_MODELS = {"signaloperation", "workflowoperation", "executionaudit", "idempotencyreceipt", "credential"}
WORKFLOW_PERMISSIONS = {
    "recover": "recover_workflowinstance",
    "control": "control_workflowinstance",
    "signal": "signal_workflowinstance",
    "audit": "audit_workflowinstance",
    "annotate": "annotate_workflowinstance",
}
# The approvers group alone manages the approval policies (four-eyes approval of recovery operations) and the
# namespace's outgoing webhooks (who is told of new failures, stalls and approval requests).
MANAGED_PERMISSIONS = tuple(
    f"{verb}_{model}" for model in ("approvalpolicy", "webhook") for verb in ("add", "change", "delete")
)

GROUPS = {
    "operators": {"views": "engine", "workflow": ("recover", "control", "signal", "annotate")},
    "approvers": {"views": "engine", "workflow": ("recover", "annotate"), "manage": MANAGED_PERMISSIONS},
    "auditors": {"views": "all", "workflow": ("audit",)},
    "viewers": {"views": "engine", "workflow": ()},
}


def groups_ensure(**_kwargs) -> None:
    """Create or update the operators, auditors and viewers groups."""
    history_permissions = Permission.objects.filter(content_type__app_label="history")
    views = [p for p in history_permissions if p.codename.startswith("view_")]
    by_codename = {p.codename: p for p in history_permissions}
    for name, grant in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        chosen = [p for p in views if grant["views"] == "all" or p.codename[len("view_") :] not in AUDIT_MODELS]
        chosen += [
            by_codename[WORKFLOW_PERMISSIONS[w]] for w in grant["workflow"] if WORKFLOW_PERMISSIONS[w] in by_codename
        ]
        chosen += [by_codename[codename] for codename in grant.get("manage", ()) if codename in by_codename]
        group.permissions.set(chosen)
