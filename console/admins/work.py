"""The Work heading's tables beside the instances (whose admin, the instance page and its forms, is
``console/admin.py``): definitions, tasks, signals and incidents."""

import functools

from django.contrib import admin
from django.db.models import Q
from django.template.loader import render_to_string

from console.admins.base import ReadOnlyAdmin, scoped
from console.filters import QueueFilter
from history import models
from history.selectors.instances import task_attempts


@admin.register(models.WorkflowDefinition)
class WorkflowDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("name", "version", "namespace", "created_at")
    search_fields = ("=id", "name")


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


@admin.register(models.Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("id", "workflow", "name", "target_step_key", "state", "disposition", "accepted_at")
    list_filter = ("state", "disposition")
    search_fields = ("=id", "=workflow__id", "name")


@admin.register(models.Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("duty", "item_kind", "item_id", "instance", "error_class", "count", "last_seen_at", "resolved_at")
    list_filter = ("duty", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("=item_id", "=instance__id", "error_class")

    def get_queryset(self, request):
        # An instance's incident is seen only by those who see the instance (its definition's queues).
        instances = scoped(request, models.WorkflowInstance.objects.all()).values("id")
        return super().get_queryset(request).filter(Q(instance__isnull=True) | Q(instance_id__in=instances))


@admin.register(models.FailureSignature)
class FailureSignatureAdmin(ReadOnlyAdmin):
    """What made instances enter review (``history.signatures``); the queue groups and filters by it."""

    list_display = ("pattern", "definition", "step_key", "review_cause", "count", "last_seen")
    list_filter = ("review_cause", ("last_seen", admin.DateFieldListFilter))
    search_fields = ("=id", "pattern")
    ordering = ("-last_seen",)


@admin.register(models.Stall)
class StallAdmin(ReadOnlyAdmin):
    """The watchdog's marks (``engine.watchdog``): instances stuck outside review."""

    list_display = ("instance", "reason", "detail", "since", "marked_at")
    list_filter = ("reason",)
    search_fields = ("=instance__id",)
    ordering = ("since",)
