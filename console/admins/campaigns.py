"""Repair campaigns in the console: made from a selection of the instance list (of any size), a failure signature
or pasted ids and business keys; previewed, approved, started, widened, paused, resumed, cancelled and taken up
again on their own page, with the per-item ledger, its filters and its exports (``recovery.campaigns``)."""

import datetime as dt

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from console.admins.base import PERMISSIONS, IncidentAdmin, operator_identity, scoped
from console.audit import EXPORT_FORMATS, export_lines
from core import exactjson
from core.errors import InvalidArgument, WeaveError
from core.identity import identity_of_user
from core.times import format_optional_time
from history.models import (
    Campaign,
    CampaignItem,
    CampaignState,
    FailureSignature,
    InstanceState,
    ItemOutcome,
    RepairCheck,
    WorkflowInstance,
)
from recovery.campaigns import (
    DEFAULTS,
    campaign_again,
    campaign_make,
    campaign_move,
    campaign_preview,
    campaign_tally,
    campaigns_visible,
    instances_named,
)
from recovery.decisions import KINDS

LEDGER_PAGE = 100
EXPORT_BATCH = 2_000
# What each state lets a person do on the page, as (action, button).
MOVES = {
    CampaignState.PROPOSED: (("approved", "Approve"), ("cancelled", "Reject")),
    CampaignState.READY: (("started", "Start"), ("cancelled", "Cancel")),
    CampaignState.RUNNING: (("paused", "Pause"), ("cancelled", "Cancel")),
    CampaignState.CANARY_DONE: (("widened", "Widen to every item"), ("paused", "Pause"), ("cancelled", "Cancel")),
    CampaignState.PAUSED: (("resumed", "Resume"), ("cancelled", "Cancel")),
    CampaignState.HALTED: (("resumed", "Resume"), ("cancelled", "Cancel")),
}
LEDGER_COLUMNS = ["position", "instance", "revision", "outcome", "code", "detail", "decision", "done_at"]


class CampaignForm(forms.Form):
    """The decision every item makes and how the campaign runs; checked by the service's own rules."""

    title = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=[(kind.name, kind.title) for kind in KINDS.values()])
    step_key = forms.CharField(max_length=64, help_text="the step every instance's decision is about")
    conclusion = forms.ChoiceField(
        choices=[("", "—"), ("SUCCEEDED", "SUCCEEDED"), ("FAILED", "FAILED")],
        required=False,
        help_text="for “The work ended this way”",
    )
    result = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="JSON: the result for “The work ended this way”, the answer for “The answer is still pending”",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=1024)
    evidence_ref = forms.CharField(max_length=512, label="Evidence", help_text="a ticket, a report: ticket:OPS-123")
    declared = forms.BooleanField(
        required=False,
        label="I declare what the chosen kind states, for every instance of this campaign",
    )
    canary_size = forms.IntegerField(initial=DEFAULTS["canary_size"], help_text="items run before it is widened")
    halt_percent = forms.IntegerField(
        initial=DEFAULTS["halt_percent"], help_text="it halts itself past this share of items refused or failed"
    )
    rate_per_second = forms.IntegerField(initial=DEFAULTS["rate_per_second"], help_text="items a second at most")

    def command(self) -> dict:
        """The campaign's command from the cleaned fields; a result that is not JSON is the result's error."""
        data = self.cleaned_data
        command = {name: data[name] for name in ("title", "kind", "step_key", "reason", "evidence_ref", "declared")}
        command |= {name: data[name] for name in ("canary_size", "halt_percent", "rate_per_second")}
        outcome = KINDS[data["kind"]].outcome
        if "conclusion" in outcome:
            command["conclusion"] = data["conclusion"]
        if "result" in outcome:
            try:
                command["result"] = exactjson.loads(data["result"])
            except ValueError as error:
                raise InvalidArgument(f"result: not JSON ({error})", field="result") from error
        return command


class PastedForm(forms.Form):
    instances = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}),
        label="Instances",
        help_text="one instance id or business key a line; each line is checked and the unknown ones are named",
    )


def _made(request, form: CampaignForm, instances, source: str):
    """Make the campaign, or put the service's refusal on the field it names; the redirect, or None."""
    identity = operator_identity(request, "recover")
    try:
        campaign = campaign_make(
            identity=identity,
            instances=instances,
            source=source,
            command=form.command(),
            owner=request.user.get_username(),
        )
    except WeaveError as error:
        field = getattr(error, "field", None)
        form.add_error(field if field in form.fields else None, error.message)
        return None
    messages.success(
        request, f"Campaign {campaign.title} made with {campaign.total} instances: preview it, then start it."
    )
    return HttpResponseRedirect(reverse("admin:history_campaign_change", args=[campaign.pk]))


def _new_page(request, form, *, selected: int, source: str, hidden: dict, pasted=None):
    context = {
        **admin.site.each_context(request),
        "opts": Campaign._meta,
        "title": "Repair as a campaign",
        "form": form,
        "pasted": pasted,
        "selected": selected,
        "source": source,
        "hidden": hidden,
    }
    return TemplateResponse(request, "admin/console/campaign_new.html", context)


@admin.action(description="Repair the selected instances as a campaign", permissions=["recover"])
def campaign_from_selection(modeladmin, request, queryset):
    """The changelist's selection, of any size ("select all" included): re-posted with the form until it is made."""
    operator_identity(request, "recover")
    form = CampaignForm(request.POST if "make" in request.POST else None)
    selected = queryset.order_by().count()
    source = f"{selected} instances selected on the instance list"
    if "?" in request.get_full_path():
        source += f" ({request.get_full_path().split('?', 1)[1]})"
    if "make" in request.POST and form.is_valid():
        made = _made(request, form, queryset, source)
        if made is not None:
            return made
    hidden = {
        "action": "campaign_from_selection",
        "select_across": request.POST.get("select_across", "0"),
        "index": request.POST.get("index", "0"),
    }
    page = _new_page(request, form, selected=selected, source=source, hidden=hidden)
    page.context_data["selected_ids"] = request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)
    return page


@admin.register(Campaign)
class CampaignAdmin(IncidentAdmin):
    list_display = ("title", "state", "total", "owner", "created_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("title",)
    ordering = ("-created_at",)
    show_full_result_count = False

    def has_add_permission(self, request):
        return request.user.has_perm(PERMISSIONS["recover"]) and identity_of_user(request.user) is not None

    def get_queryset(self, request):
        campaigns = super().get_queryset(request)
        identity = identity_of_user(request.user)
        if identity is None:
            return campaigns if request.user.is_superuser else campaigns.none()
        # A campaign names its instances: one made by someone with queues beyond the operator's is not shown.
        return campaigns & campaigns_visible(identity)

    def add_view(self, request, form_url="", extra_context=None):
        """From a failure signature (``?signature=``: its instances in review now) or pasted lines."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        identity = operator_identity(request, "recover")
        posted = request.POST if request.method == "POST" else None
        form = CampaignForm(posted)
        signature_id = request.GET.get("signature", "")
        if signature_id:
            signature = get_object_or_404(scoped(request, FailureSignature.objects.all()), pk=signature_id)
            instances = scoped(request, WorkflowInstance.objects.filter(failure_signature=signature))
            instances = instances.filter(state=InstanceState.NEEDS_REVIEW)
            source = f"failure signature {signature.id}: {signature.pattern}"
            if posted and form.is_valid() and (made := _made(request, form, instances, source)):
                return made
            if not posted:
                form.initial |= {
                    "step_key": signature.step_key,
                    "title": f"{signature.review_cause}: {signature.pattern}"[:200],
                }
            return _new_page(request, form, selected=instances.count(), source=source, hidden={})
        pasted = PastedForm(posted)
        if posted and pasted.is_valid() and form.is_valid():
            ids, unknown = instances_named(identity, pasted.cleaned_data["instances"].splitlines())
            if unknown:
                more = " …" if len(unknown) > 20 else ""
                pasted.add_error(
                    "instances", "not found: " + "; ".join(f"line {n + 1}: {text}" for n, text in unknown[:20]) + more
                )
            else:
                instances = WorkflowInstance.objects.filter(pk__in=ids)
                if made := _made(request, form, instances, f"{len(ids)} pasted ids and business keys"):
                    return made
        return _new_page(request, form, selected=0, source="pasted ids or business keys", hidden={}, pasted=pasted)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        campaign = get_object_or_404(self.get_queryset(request), pk=object_id)
        tally = campaign_tally(campaign)
        counts = tally.counts
        outcome = request.GET.get("outcome", "")
        items = CampaignItem.objects.filter(campaign=campaign).order_by("position")
        if outcome in ItemOutcome.values:
            items = items.filter(outcome=outcome)
        after = request.GET.get("after", "")
        if after.isdigit():
            items = items.filter(position__gt=int(after))
        ledger = list(items.select_related("decision")[: LEDGER_PAGE + 1])
        identity = identity_of_user(request.user)
        done = campaign.total - counts[ItemOutcome.PENDING]
        command = exactjson.loads(campaign.command)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": campaign.title,
            "campaign": campaign,
            "counts": counts,
            "done": done,
            "percent": round(100 * done / campaign.total) if campaign.total else 100,
            "preview": campaign_preview(campaign)
            if campaign.state in (CampaignState.PROPOSED, CampaignState.READY)
            else None,
            "ledger": ledger[:LEDGER_PAGE],
            "verification": tally.verification,
            # The latest verdict on each shown instance's repair since the campaign was made.
            "verdicts": _latest_verdicts(campaign, [item.instance_id for item in ledger[:LEDGER_PAGE]]),
            "outcome": outcome,
            "outcomes": ItemOutcome.choices,
            "moves": MOVES.get(campaign.state, ()) if self.has_change_permission(request) else (),
            "again": self.has_change_permission(request)
            and campaign.state
            in (CampaignState.DONE, CampaignState.CANCELLED, CampaignState.HALTED, CampaignState.PAUSED),
            "maker": identity is not None and identity.actor_id == campaign.actor_id,
            "command": command,
            "result": exactjson.dumps(command["result"]) if "result" in command else "",
            "log": [(dt.datetime.fromisoformat(entry["at"]), entry) for entry in campaign.log],
        }
        return TemplateResponse(request, "admin/console/campaign.html", context)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<str:object_id>/move/", view(self.move_view), name="history_campaign_move"),
            path("<str:object_id>/again/", view(self.again_view), name="history_campaign_again"),
            path("<str:object_id>/ledger.<str:fmt>", view(self.export_view), name="history_campaign_ledger"),
            *super().get_urls(),
        ]

    def move_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        identity = operator_identity(request, "recover")
        campaign = get_object_or_404(self.get_queryset(request), pk=object_id)
        action = request.POST.get("action", "")
        try:
            campaign_move(
                identity=identity,
                campaign_id=campaign.id,
                action=action,
                by=request.user.get_username(),
                note=request.POST.get("note", ""),
            )
        except WeaveError as error:
            messages.error(request, error.message)
        else:
            messages.success(request, f"Campaign {action}.")
        return HttpResponseRedirect(reverse("admin:history_campaign_change", args=[campaign.pk]))

    def again_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        identity = operator_identity(request, "recover")
        campaign = get_object_or_404(self.get_queryset(request), pk=object_id)
        try:
            child = campaign_again(identity=identity, campaign_id=campaign.id, owner=request.user.get_username())
        except WeaveError as error:
            messages.error(request, error.message)
            return HttpResponseRedirect(reverse("admin:history_campaign_change", args=[campaign.pk]))
        messages.success(request, f"Campaign {child.title} made with {child.total} instances.")
        return HttpResponseRedirect(reverse("admin:history_campaign_change", args=[child.pk]))

    def export_view(self, request, object_id, fmt):
        if not self.has_view_permission(request) or fmt not in EXPORT_FORMATS:
            raise PermissionDenied
        campaign = get_object_or_404(self.get_queryset(request), pk=object_id)
        outcome = request.GET.get("outcome", "")
        rows = _ledger_rows(campaign, outcome if outcome in ItemOutcome.values else "")
        response = StreamingHttpResponse(
            export_lines(rows, LEDGER_COLUMNS, _ledger_record, fmt), content_type=EXPORT_FORMATS[fmt]
        )
        response["Content-Disposition"] = f'attachment; filename="campaign-{campaign.pk}-ledger.{fmt}"'
        return response


def _latest_verdicts(campaign: Campaign, instance_ids: list[str]) -> list[tuple[str, str, str]]:
    """(instance, verdict, detail) of the latest repair watch of each instance since the campaign was made."""
    checks = RepairCheck.objects.filter(instance_id__in=instance_ids, made_at__gte=campaign.created_at)
    latest: dict[str, tuple[str, str, str]] = {}
    for row in checks.order_by("-made_at").values_list("instance_id", "verdict", "detail"):
        latest.setdefault(row[0], row)
    return list(latest.values())


def _ledger_rows(campaign: Campaign, outcome: str):
    """Every item of the ledger in selection order, in keyset batches: memory stays bounded by the batch."""
    items = CampaignItem.objects.filter(campaign=campaign).order_by("position")
    if outcome:
        items = items.filter(outcome=outcome)
    last = -1
    while batch := list(items.filter(position__gt=last)[:EXPORT_BATCH]):
        yield from batch
        last = batch[-1].position


def _ledger_record(item: CampaignItem) -> dict:
    return {
        "position": item.position,
        "instance": item.instance_id,
        "revision": item.revision,
        "outcome": item.outcome,
        "code": item.code,
        "detail": item.detail,
        "decision": item.decision_id or "",
        "done_at": format_optional_time(item.done_at) or "",
    }
