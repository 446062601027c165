"""Incident cases in the console: opened from a failure signature (the queue's "open a case") or a selection of
the instance list, worked on their own page (progress, members, notes, abandonments), closed, exported."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from console.admins.base import HttpsURLField, IncidentAdmin, scoped
from console.attention import may_annotate
from console.cases import (
    MAX_MEMBERS,
    CaseRefused,
    case_close,
    case_open,
    case_progress,
    case_summary,
    member_abandon,
    note_add,
    summary_json,
    summary_markdown,
)
from console.models import Case, CaseMember, CaseState
from core.identity import identity_of_user
from history.models import FailureSignature, WorkflowInstance
from history.selectors.access import visible_definition_ids, visible_rows
from recovery.campaigns import campaigns_visible

MEMBERS_SHOWN = 200
CAMPAIGNS_SHOWN = 20
EXPORTS = {"md": (summary_markdown, "text/markdown"), "json": (summary_json, "application/json")}


class CaseForm(forms.ModelForm):
    """A new case of a failure signature's instances in review now."""

    class Meta:
        model = Case
        fields = ("title", "signature", "ticket_url")
        field_classes = {"ticket_url": HttpsURLField}

    identity = None  # set per request by CaseAdmin.get_form

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        signatures = visible_rows(FailureSignature.objects.all(), self.identity).order_by("-last_seen")
        self.fields["signature"] = forms.ModelChoiceField(
            signatures,
            help_text="its instances in review now become the case's; a selection of the instance list "
            "becomes a case with its action",
        )
        self.fields["ticket_url"].widget.attrs["placeholder"] = "https://tickets.example/INC-1234"


@admin.register(Case)
class CaseAdmin(IncidentAdmin):
    """Cases are the console's own records: viewers see them, who may annotate opens and works them."""

    list_display = ("title", "state", "opened_by", "opened_at", "closed_at")
    list_filter = ("state",)
    search_fields = ("title",)
    ordering = ("state", "-opened_at")
    form = CaseForm

    def has_add_permission(self, request):
        return may_annotate(request.user) and identity_of_user(request.user) is not None

    def get_queryset(self, request):
        cases = scoped(request, super().get_queryset(request))
        identity = identity_of_user(request.user)
        if identity is None or identity.queues is None:
            return cases
        # A case names its instances: one with an instance of a queue the operator may not see is not shown.
        hidden = WorkflowInstance.objects.filter(namespace_id=identity.namespace_id).exclude(
            definition_id__in=visible_definition_ids(identity)
        )
        return cases.exclude(members__instance_id__in=hidden.values("id"))

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"identity": identity_of_user(request.user)})

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        form_class = self.get_form(request)
        form = form_class(request.POST or None, initial=self.get_changeform_initial_data(request))
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                case = case_open(
                    identity=form.identity,
                    username=request.user.get_username(),
                    title=data["title"],
                    ticket_url=data["ticket_url"],
                    signature=data["signature"],
                )
            except CaseRefused as refusal:
                form.add_error("signature", str(refusal))
            else:
                return _opened(request, case)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Open an incident case",
            "form": form,
        }
        return TemplateResponse(request, "admin/console/case_open.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        case = get_object_or_404(self.get_queryset(request), pk=object_id)
        progress = case_progress(case)
        members = list(case.members.order_by("abandoned_at", "instance_id")[:MEMBERS_SHOWN])
        instances = WorkflowInstance.objects.in_bulk([m.instance_id for m in members])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": case.title,
            "case": case,
            "progress": progress,
            "counts": [(status, progress.counts[status]) for status in progress.counts],
            "members": [(m, instances.get(m.instance_id), progress.statuses.get(m.instance_id)) for m in members],
            "members_left_out": max(progress.total - MEMBERS_SHOWN, 0),
            "notes": case.notes.order_by("-created_at"),
            "campaigns": _campaigns_of(request, case),
            "may_work": case.state == CaseState.OPEN and self.has_change_permission(request),
            "percent": round(100 * progress.accounted / progress.total) if progress.total else 100,
        }
        return TemplateResponse(request, "admin/console/case.html", context)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:object_id>/note/", view(self.note_view), name="console_case_note"),
            path("<int:object_id>/abandon/", view(self.abandon_view), name="console_case_abandon"),
            path("<int:object_id>/close/", view(self.close_view), name="console_case_close"),
            path("<int:object_id>/summary.<str:kind>", view(self.export_view), name="console_case_export"),
            *super().get_urls(),
        ]

    def _worked(self, request, object_id, work):
        """A POST that works an open case: done, or refused with its reason; back to the case either way."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        case = get_object_or_404(self.get_queryset(request), pk=object_id)
        try:
            done = work(case, request.POST, request.user.get_username())
        except CaseRefused as refusal:
            messages.error(request, str(refusal))
        else:
            messages.success(request, done)
        return HttpResponseRedirect(reverse("admin:console_case_change", args=[case.pk]))

    def note_view(self, request, object_id):
        def work(case, post, username):
            if case.state != CaseState.OPEN:
                raise CaseRefused("the case is closed")
            note_add(case=case, username=username, text=post.get("text", ""), evidence_ref=post.get("evidence_ref", ""))
            return "Note added."

        return self._worked(request, object_id, work)

    def abandon_view(self, request, object_id):
        def work(case, post, username):
            instance_id = post.get("instance", "")
            member_abandon(case=case, instance_id=instance_id, username=username, reason=post.get("reason", ""))
            return f"Instance {instance_id} abandoned: it counts as accounted for."

        return self._worked(request, object_id, work)

    def close_view(self, request, object_id):
        def work(case, post, username):
            case_close(case=case, username=username)
            return "Case closed: its summary is kept as it is now."

        return self._worked(request, object_id, work)

    def export_view(self, request, object_id, kind):
        if not self.has_view_permission(request):
            raise PermissionDenied
        case = get_object_or_404(self.get_queryset(request), pk=object_id)
        if kind not in ("md", "json"):
            return HttpResponse("summary.md or summary.json", status=404, content_type="text/plain")
        summary = case_summary(case)
        body, media = (
            (summary_markdown(summary), "text/markdown")
            if kind == "md"
            else (summary_json(summary), "application/json")
        )
        response = HttpResponse(body, content_type=f"{media}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="case-{case.pk}-summary.{kind}"'
        return response


@admin.action(description="Open an incident case with the selected instances", permissions=["annotate"])
def case_from_selection(modeladmin, request, queryset):
    identity = identity_of_user(request.user)
    # One past the cap: case_open refuses a selection bigger than a case holds.
    ids = list(queryset.order_by("id").values_list("id", flat=True)[: MAX_MEMBERS + 1])
    try:
        case = case_open(
            identity=identity,
            username=request.user.get_username(),
            title=f"{len(ids)} selected instances",
            ticket_url="",
            instance_ids=ids,
        )
    except CaseRefused as refusal:
        modeladmin.message_user(request, str(refusal), messages.ERROR)
        return None
    return _opened(request, case)


def _campaigns_of(request, case: Case) -> list:
    """The repair campaigns the operator may see that hold any instance of the case, the newest first."""
    identity = identity_of_user(request.user)
    if identity is None:
        return []
    members = CaseMember.objects.filter(case=case).values("instance_id")
    touching = campaigns_visible(identity).filter(items__instance_id__in=members).distinct()
    return list(touching.order_by("-created_at")[:CAMPAIGNS_SHOWN])


def _opened(request, case: Case):
    messages.success(request, f"Case {case.title} opened with {case.members.count()} instances.")
    return HttpResponseRedirect(reverse("admin:console_case_change", args=[case.pk]))
