"""The Audit heading's tables: who did what and why, each with its actor named, a time range, and exports."""

import datetime as dt
import json

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, StreamingHttpResponse
from django.urls import path
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from console.admins.base import IndexedChangeList, ReadOnlyAdmin, scoped
from console.audit import EXPORT_FORMATS, actor_names, export_lines, newest_first
from console.filters import NamespacedValuesFilter, TimeRangeFilter
from console.links import instance_label, instance_name
from console.templatetags.console import when
from core import clock
from history import models


def before_after_table(before, after):
    """Before and after side by side, one row per key, changed keys highlighted."""
    # None is "no prior state" (an acceptance), not a value to compare.
    before_map = {} if before is None else before if isinstance(before, dict) else {"value": before}
    after_map = {} if after is None else after if isinstance(after, dict) else {"value": after}
    keys = list(dict.fromkeys([*before_map, *after_map]))

    def cell(mapping, key):
        return json.dumps(mapping[key], ensure_ascii=False, sort_keys=True) if key in mapping else "—"

    rows = format_html_join(
        "",
        '<tr class="{}"><th>{}</th><td><code>{}</code></td><td><code>{}</code></td></tr>',
        (
            (
                "changed" if cell(before_map, k) != cell(after_map, k) else "same",
                k,
                cell(before_map, k),
                cell(after_map, k),
            )
            for k in keys
        ),
    )
    return format_html(
        '<table class="weave-diff"><thead><tr><th>field</th><th>before</th><th>after</th></tr></thead>'
        "<tbody>{}</tbody></table>",
        rows,
    )


class AuditChangeList(IndexedChangeList):
    """The page's rows, each with who its actor is (one query for the page, not one per row)."""

    def get_results(self, request):
        super().get_results(request)
        names = actor_names(self.result_list)
        for row in self.result_list:
            row.actor_name = names.get((row.namespace_id, row.actor_id), "")


# The list's reason column shows this many characters; the whole reason is on hover and on the row's page.
REASON_SHOWN = 60


def instance_link(instance, detail: str = ""):
    """An instance by its name (``console.links.instance_label``), with a detail beside it."""
    link = instance_label(instance)
    return format_html('{} <span class="weave-muted">{}</span>', link, detail) if detail else link


class AuditAdmin(ReadOnlyAdmin):
    # Few and narrow, to read at 1 280 px beside the filters: ids and the request are on hover and on the row's page.
    list_display = ("created", "who", "action_taken", "instance", "short_reason", "evidence")
    list_filter = (("action", NamespacedValuesFilter), ("created_at", TimeRangeFilter))
    # Reason and evidence ref by words they contain (a ticket such as OPS-42); the other columns exact; a login's
    # name finds its actor (see below).
    search_fields = ("=id", "=operation_id", "=actor_id", "=request_id", "reason", "evidence_ref")
    ordering = ("-created_at",)
    readonly_fields = ("actor", "before_and_after")
    exclude = ("before", "after")
    change_list_template = "admin/console/audit_change_list.html"
    # The target columns an export adds to the shared ones, per audit.
    export_columns: tuple[str, ...] = ()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and request.user.has_perm("history.audit_workflowinstance")

    def get_changelist(self, request, **kwargs):
        return AuditChangeList

    def name_of_actor(self, obj) -> str:
        name = getattr(obj, "actor_name", None)
        if name is None:
            name = actor_names([obj]).get((obj.namespace_id, obj.actor_id), "")
        return name or "unknown actor"

    @admin.display(description="actor")
    def actor(self, obj):
        return format_html('{} <code class="weave-muted">{}</code>', self.name_of_actor(obj), obj.actor_id)

    @admin.display(description="who")
    def who(self, obj):
        return format_html('<span title="actor {}">{}</span>', obj.actor_id, self.name_of_actor(obj))

    @admin.display(description="when", ordering="created_at")
    def created(self, obj):
        return when(obj.created_at)

    @admin.display(description="action", ordering="action")
    def action_taken(self, obj):
        return format_html('<span title="request {}">{}</span>', obj.request_id or "—", obj.action)

    def instance_of(self, obj):
        """The instance a row concerns, read with its definition (``list_select_related``)."""
        return obj.workflow

    @admin.display(description="instance")
    def instance(self, obj):
        return instance_link(self.instance_of(obj))

    @admin.display(description="reason")
    def short_reason(self, obj):
        return format_html('<span title="{}">{}</span>', obj.reason, Truncator(obj.reason).chars(REASON_SHOWN))

    @admin.display(description="evidence")
    def evidence(self, obj):
        return obj.evidence_ref or "—"

    @admin.display(description="before → after")
    def before_and_after(self, obj):
        return before_after_table(obj.before, obj.after)

    def get_search_results(self, request, queryset, search_term):
        found, duplicates = super().get_search_results(request, queryset, search_term)
        logins = search_term.split()
        if logins:
            actors = scoped(request, models.Operator.objects.filter(user__username__in=logins)).values("actor_id")
            found |= queryset.filter(actor_id__in=actors)
        return found, duplicates

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_export"
        export = path("export/<str:fmt>/", self.admin_site.admin_view(self.export_view), name=name)
        return [export, *super().get_urls()]

    def export_view(self, request, fmt):
        """The changelist's rows as its filters and search choose them, all of them, streamed newest first."""
        if fmt not in EXPORT_FORMATS:
            raise Http404("export formats: csv, jsonl")
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("a filter of this list is not valid; open the list to see which")
        rows = newest_first(changelist.get_queryset(request), related=self.get_list_select_related(request))
        names: dict = {}

        def record(row) -> dict:
            key = (row.namespace_id, row.actor_id)
            if key not in names:
                # Remembered when nobody is known by it too: an unnamed actor is looked up once, not per row.
                names[key] = actor_names([row]).get(key, "")
            return {
                "id": row.id,
                "created_at": row.created_at.astimezone(dt.UTC).isoformat(),
                "action": row.action,
                "actor_id": row.actor_id,
                "actor": names.get(key, ""),
                "operation_id": row.operation_id,
                "request_id": row.request_id,
                "reason": row.reason,
                "evidence_ref": row.evidence_ref,
                "instance": instance_name(self.instance_of(row)),
                **{column: getattr(row, column) for column in self.export_columns},
                "before": row.before,
                "after": row.after,
            }

        columns = ["id", "created_at", "action", "actor_id", "actor", "operation_id", "request_id", "reason"]
        columns += ["evidence_ref", "instance", *self.export_columns, "before", "after"]
        response = StreamingHttpResponse(export_lines(rows, columns, record, fmt), content_type=EXPORT_FORMATS[fmt])
        stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="{self.opts.model_name}-{stamp}.{fmt}"'
        return response


@admin.register(models.SignalOperation)
class SignalOperationAdmin(AuditAdmin):
    list_select_related = ("workflow__definition",)
    search_fields = AuditAdmin.search_fields + ("=workflow__id", "=workflow__business_key", "=signal__id")
    export_columns = ("workflow_id", "signal_id")


@admin.register(models.WorkflowOperation)
class WorkflowOperationAdmin(AuditAdmin):
    list_select_related = ("workflow__definition",)
    search_fields = AuditAdmin.search_fields + ("=workflow__id", "=workflow__business_key")
    export_columns = ("workflow_id", "step_key", "activation_id")

    @admin.display(description="instance")
    def instance(self, obj):
        return instance_link(obj.workflow, obj.step_key)


@admin.register(models.ExecutionAudit)
class ExecutionAuditAdmin(AuditAdmin):
    list_select_related = ("task__source_instance__definition",)
    search_fields = AuditAdmin.search_fields + ("=task__id", "=task__source_instance__business_key")
    export_columns = ("task_id",)

    def instance_of(self, obj):
        return obj.task.source_instance


@admin.register(models.IdempotencyReceipt)
class IdempotencyReceiptAdmin(ReadOnlyAdmin):
    list_display = ("key", "operation", "namespace", "workflow", "status_code", "created_at")
    list_select_related = ("namespace",)
    search_fields = ("=key", "=workflow__id")
