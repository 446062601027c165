"""The engine's tables in the admin, read-only: state changes only through the services."""

import functools
import json

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from console.graph import step_graph_svg
from core.identity import identity_of_user
from history import models
from history.selectors.instance_page import instance_page
from history.selectors.instances import task_attempts
from history.selectors.visibility import visible_rows

admin.site.site_header = "Weave operations"
admin.site.site_title = "Weave operations"
admin.site.index_title = "Workflow engine"


class CappedCountPaginator(Paginator):
    """Counts at most CAP rows, so a changelist over millions of rows never scans them all."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        # No ORDER BY inside the capped count: it would sort CAP rows just to count them.
        return self.object_list.order_by()[: self.CAP + 1].count()


class DefinitionFilter(admin.SimpleListFilter):
    """Definitions of the user's namespace: a small table, never a DISTINCT over instances."""

    title = "definition"
    parameter_name = "definition"

    def lookups(self, request, model_admin):
        rows = scoped(request, models.WorkflowDefinition.objects.order_by("name", "version"))
        return [(d.id, str(d)) for d in rows]

    def queryset(self, request, queryset):
        return queryset.filter(definition_id=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        rows = scoped(request, models.Queue.objects.order_by("name"))
        return [(q.id, q.name) for q in rows]

    def queryset(self, request, queryset):
        return queryset.filter(queue_id=self.value()) if self.value() else queryset


def scoped(request, queryset):
    """What this admin user may see: its operator namespace and queues (a bare superuser sees all)."""
    user = request.user
    if user.is_superuser and not hasattr(user, "weave_operator"):
        return queryset
    return visible_rows(queryset, identity_of_user(user))


class ReadOnlyAdmin(admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50

    class Media:
        css = {"all": ["console/console.css"]}

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return scoped(request, super().get_queryset(request))

    def get_list_select_related(self, request):
        # Django's default follows every foreign key recursively once list_display shows one: for
        # poll rounds a 34-table join MariaDB never finishes planning. Join only the columns shown.
        if self.list_select_related is not False:
            return self.list_select_related
        foreign_keys = {f.name for f in self.model._meta.fields if f.many_to_one}
        return tuple(name for name in self.list_display if name in foreign_keys)


@admin.register(models.Namespace)
class NamespaceAdmin(ReadOnlyAdmin):
    list_display = ("name", "id", "created_at")
    search_fields = ("=id", "name")


@admin.register(models.Application)
class ApplicationAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "active_tasks", "max_active_tasks")
    search_fields = ("=id", "name")


@admin.register(models.Queue)
class QueueAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "active_tasks", "max_active_tasks")
    search_fields = ("=id", "name")


@admin.register(models.Credential)
class CredentialAdmin(ReadOnlyAdmin):
    list_display = ("label", "key_id", "namespace", "actor_id", "created_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("=id", "=key_id", "label", "=actor_id")
    exclude = ("token_digest",)


@admin.register(models.Operator)
class OperatorAdmin(ReadOnlyAdmin):
    list_display = ("user", "namespace", "actor_id")
    list_select_related = ("user", "namespace")


@admin.register(models.WorkflowDefinition)
class WorkflowDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("name", "version", "namespace", "created_at")
    search_fields = ("=id", "name")


@admin.register(models.WorkflowInstance)
class WorkflowInstanceAdmin(ReadOnlyAdmin):
    list_display = ("id", "definition", "business_key", "state", "paused", "stop_kind", "revision", "updated_at")
    list_filter = (
        "state",
        "paused",
        "stop_kind",
        DefinitionFilter,
        ("updated_at", admin.DateFieldListFilter),
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("=id", "=business_key")
    ordering = ("-updated_at",)
    instance_template = "admin/history/workflowinstance/instance_page.html"

    def instance_context(self, request, instance) -> dict:
        """The page's data; recovery's admin adds eligibility and forms on top."""
        with_audit = request.user.has_perm("history.audit_workflowinstance")
        page = instance_page(instance=instance, with_audit=with_audit)
        states = {view.step.key: view.step.state for view in page.steps}
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Instance {instance.id}",
            "page": page,
            "graph": step_graph_svg(instance.definition.spec.get("steps", []), states),
            "with_audit": with_audit,
        }

    def visible_instance(self, request, object_id) -> models.WorkflowInstance:
        """The instance if this user may see it (namespace and queues), else 404."""
        instance = self.get_queryset(request).select_related("definition").filter(pk=object_id).first()
        if instance is None:
            raise Http404("no such instance in your namespace")
        return instance

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        instance = self.visible_instance(request, object_id)
        return TemplateResponse(request, self.instance_template, self.instance_context(request, instance))


@admin.register(models.Gate)
class GateAdmin(ReadOnlyAdmin):
    list_display = ("instance", "open", "revision")
    list_filter = ("open",)
    search_fields = ("=instance__id",)


@admin.register(models.Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("key", "instance", "kind", "state", "revision", "updated_at")
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id", "key")


@admin.register(models.Activation)
class ActivationAdmin(ReadOnlyAdmin):
    list_display = ("id", "step", "sequence", "state", "revision", "created_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id", "=step__id")
    ordering = ("-created_at",)


@admin.register(models.Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue_name", "handler", "state", "attempt_count", "max_attempts", "priority", "created_at")
    # The queue's name without a join: joining the queue table makes MariaDB start from the queues
    # and sort every task.
    list_filter = ("state", QueueFilter, ("created_at", admin.DateFieldListFilter))
    search_fields = ("=id", "=business_key", "=source_instance__id")
    ordering = ("-created_at",)
    readonly_fields = ("execution_history",)

    @admin.display(description="queue")
    def queue_name(self, obj):
        return queue_name(obj.queue_id)

    @admin.display(description="attempts and late evidence")
    def execution_history(self, obj):
        """Each attempt with what its worker reported after the lease was lost, if anything."""
        return render_to_string("admin/history/task/attempts.html", {"attempts": task_attempts(obj.id)})


@functools.lru_cache(maxsize=4096)
def queue_name(queue_id: str) -> str:
    """Queue names never change, and there are few: one lookup per queue per process."""
    return models.Queue.objects.filter(id=queue_id).values_list("name", flat=True).first() or queue_id


@admin.register(models.Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "number", "worker", "state", "lease_expires_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("=id", "=task__id")


@admin.register(models.ResultEvent)
class ResultEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "seq", "kind", "outcome", "task_revision", "created_at")
    list_filter = ("kind",)
    search_fields = ("=id", "=task__id")


@admin.register(models.InboxRecord)
class InboxRecordAdmin(ReadOnlyAdmin):
    list_display = ("id", "instance", "source_kind", "state", "disposition", "created_at", "consumed_at")
    list_filter = ("state", "source_kind", "disposition")
    search_fields = ("=id", "=instance__id", "=source_id")


@admin.register(models.PollRound)
class PollRoundAdmin(ReadOnlyAdmin):
    list_display = ("id", "activation", "round", "task", "created_at")
    search_fields = ("=id", "=activation__id", "=instance__id")


@admin.register(models.Wait)
class WaitAdmin(ReadOnlyAdmin):
    list_display = ("id", "step", "kind", "generation", "state", "deadline_at", "winner_signal")
    list_select_related = ("step",)
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id")


@admin.register(models.Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("id", "workflow", "name", "target_step_key", "state", "disposition", "accepted_at")
    list_filter = ("state", "disposition")
    search_fields = ("=id", "=workflow__id", "name")


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


class AuditAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "actor_id", "operation_id", "created_at")
    list_filter = ("action", ("created_at", admin.DateFieldListFilter))
    search_fields = ("=id", "=operation_id", "=actor_id")
    ordering = ("-created_at",)
    readonly_fields = ("before_and_after",)
    exclude = ("before", "after")

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and request.user.has_perm("history.audit_workflowinstance")

    @admin.display(description="before → after")
    def before_and_after(self, obj):
        return before_after_table(obj.before, obj.after)


@admin.register(models.SignalOperation)
class SignalOperationAdmin(AuditAdmin):
    search_fields = AuditAdmin.search_fields + ("=workflow__id", "=signal__id")


@admin.register(models.WorkflowOperation)
class WorkflowOperationAdmin(AuditAdmin):
    list_display = ("id", "action", "workflow", "step_key", "actor_id", "created_at")
    search_fields = AuditAdmin.search_fields + ("=workflow__id",)


@admin.register(models.ExecutionAudit)
class ExecutionAuditAdmin(AuditAdmin):
    search_fields = AuditAdmin.search_fields + ("=task__id",)


@admin.register(models.IdempotencyReceipt)
class IdempotencyReceiptAdmin(ReadOnlyAdmin):
    list_display = ("key", "operation", "namespace", "workflow", "status_code", "created_at")
    list_select_related = ("namespace",)
    search_fields = ("=key", "=workflow__id")


@admin.register(models.Continuation)
class ContinuationAdmin(ReadOnlyAdmin):
    list_display = ("id", "instance", "step_key", "kind", "state", "created_at", "applied_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id")


@admin.register(models.Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("duty", "item_kind", "item_id", "instance", "error_class", "count", "last_seen_at", "resolved_at")
    list_filter = ("duty", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("=item_id", "=instance__id", "error_class")

    def get_queryset(self, request):
        # An instance's incident is seen only by those who see the instance (its definition's queues).
        instances = scoped(request, models.WorkflowInstance.objects.all()).values("id")
        return super().get_queryset(request).filter(Q(instance__isnull=True) | Q(instance_id__in=instances))
