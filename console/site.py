"""The console's admin site: the review queue as its home and the tables grouped by what they are for."""

from django.contrib import admin

from console.queue import review_queue

# Each admin table under the heading of its purpose, in this order; a table no heading names goes
# under "Other" (a test keeps that empty).
PURPOSES = {
    "Work": (
        "history.WorkflowInstance",
        "history.Task",
        "history.Signal",
        "history.Incident",
        "history.WorkflowDefinition",
    ),
    "Engine records": (
        "history.Step",
        "history.Activation",
        "history.Attempt",
        "history.ResultEvent",
        "history.InboxRecord",
        "history.PollRound",
        "history.Wait",
        "history.Gate",
        "history.Continuation",
    ),
    "Audit": (
        "history.WorkflowOperation",
        "history.SignalOperation",
        "history.ExecutionAudit",
        "history.IdempotencyReceipt",
    ),
    "Access": (
        "history.Namespace",
        "history.Application",
        "history.Queue",
        "history.Credential",
        "history.Operator",
        "auth.User",
        "auth.Group",
    ),
}
OTHER = "Other"


class ConsoleSite(admin.AdminSite):
    site_header = "Weave operations"
    site_title = "Weave operations"
    index_title = "Review queue"
    index_template = "admin/console/index.html"

    def get_app_list(self, request, app_label=None):
        """The index's and the sidebar's tables under their purposes; one app's own page stays as Django has it."""
        apps = super().get_app_list(request, app_label)
        if app_label is not None:
            return apps
        tables = {f"{app['app_label']}.{entry['object_name']}": (app, entry) for app in apps for entry in app["models"]}
        groups = []
        for purpose, names in [*PURPOSES.items(), (OTHER, sorted(set(tables) - _named()))]:
            members = [tables[name] for name in names if name in tables]
            if members:
                app = members[0][0]
                groups.append({**app, "name": purpose, "models": [entry for _, entry in members]})
        return groups

    def index(self, request, extra_context=None):
        return super().index(request, {"queue": review_queue(request), **(extra_context or {})})


def _named() -> set[str]:
    return {name for names in PURPOSES.values() for name in names}
