"""The console's admin site: the review queue as its home and the tables grouped by what they are for."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path

from console.background import background_box
from console.campaigns import campaigns_box
from console.decide import my_decisions, queue_decisions
from console.proposals import MINE_DAYS, my_proposals, queue_proposals
from console.queue import queue_status, review_queue
from console.saved_views import SavedViewForm, delete_view, kept_query, save_view, view_url, views_of
from console.zone import PreferencesForm
from core.identity import identity_of_user
from history.models import Operator
from history.selectors.signatures import stall_summary

# Each admin table under the heading of its purpose, in this order; a table no heading names goes
# under "Other" (a test keeps that empty).
PURPOSES = {
    "Work": (
        "history.WorkflowInstance",
        "history.Task",
        "history.Signal",
        "history.Incident",
        "history.FailureSignature",
        "history.Stall",
        "history.Campaign",
        "console.Case",
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
        "history.ApprovalPolicy",
        "history.Webhook",
        "history.WebhookDelivery",
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
    # No public site beside the console: no "View site" link.
    site_url = None
    # The tables are one click away on the home page and in the breadcrumbs; the lists need the width.
    enable_nav_sidebar = False

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

    def get_urls(self):
        return [
            path("preferences/", self.admin_view(self.preferences_view), name="preferences"),
            path("queue/status/", self.admin_view(self.queue_status_view), name="queue_status"),
            path("views/save/", self.admin_view(save_view), name="saved_view_save"),
            path("views/<int:pk>/delete/", self.admin_view(delete_view), name="saved_view_delete"),
            *super().get_urls(),
        ]

    def queue_status_view(self, request):
        """What the home page polls to refresh its queue's counts and rows (GET only; whoever sees the home)."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        return JsonResponse(queue_status(request))

    def preferences_view(self, request):
        """The operator's own settings: the zone the console shows times in."""
        operator = Operator.objects.filter(user_id=request.user.pk).first()
        if operator is None:
            raise PermissionDenied("only a login acting as an operator has preferences")
        form = PreferencesForm(request.POST or None, initial={"time_zone": operator.time_zone})
        if request.method == "POST" and form.is_valid():
            zone = form.cleaned_data["time_zone"]
            Operator.objects.filter(pk=operator.pk).update(time_zone=zone)
            messages.success(request, f"Times are now shown in {zone}.")
            return redirect("admin:index")
        context = {**self.each_context(request), "title": "Preferences", "form": form}
        return TemplateResponse(request, "admin/console/preferences.html", context)

    def index(self, request, extra_context=None):
        identity = identity_of_user(request.user)
        context = {
            "queue": review_queue(request),
            "background": background_box(request),
            "proposals": queue_proposals(identity) if identity is not None else [],
            "my_proposals": my_proposals(identity) if identity is not None else [],
            "my_proposals_days": MINE_DAYS,
            "waiting_decisions": queue_decisions(identity) if identity is not None else [],
            "stalls": stall_summary(identity=identity) if identity is not None else None,
            "campaigns": campaigns_box(identity),
            "my_decisions": my_decisions(identity) if identity is not None else [],
            "saved_views": [(view, view_url(view)) for view in views_of(request.user)],
            "save_form": SavedViewForm(user=request.user),
            "current_query": kept_query(request.GET),
        }
        return super().index(request, {**context, **(extra_context or {})})


def _named() -> set[str]:
    return {name for names in PURPOSES.values() for name in names}
