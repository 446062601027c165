"""The Engine records heading's tables: what the engine writes as it runs, read-only."""

from django.contrib import admin

from console.admins.base import ReadOnlyAdmin
from history import models


class RecordAdmin(ReadOnlyAdmin):
    """An engine record reaches its namespace through its instance or task: a count checks that row for each
    row counted, so it stops a page past the one shown."""

    pages_counted_ahead = 1


@admin.register(models.Gate)
class GateAdmin(RecordAdmin):
    list_display = ("instance", "open", "revision")
    list_filter = ("open",)
    search_fields = ("=instance__id",)


@admin.register(models.Step)
class StepAdmin(RecordAdmin):
    list_display = ("key", "instance", "kind", "state", "revision", "updated_at")
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id", "key")


@admin.register(models.Activation)
class ActivationAdmin(RecordAdmin):
    list_display = ("id", "step", "sequence", "state", "revision", "created_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id", "=step__id")
    ordering = ("-created_at",)


@admin.register(models.Attempt)
class AttemptAdmin(RecordAdmin):
    list_display = ("id", "task", "number", "worker", "state", "lease_expires_at", "finished_at")
    list_filter = ("state",)
    search_fields = ("=id", "=task__id")


@admin.register(models.ResultEvent)
class ResultEventAdmin(RecordAdmin):
    list_display = ("id", "task", "seq", "kind", "outcome", "task_revision", "created_at")
    list_filter = ("kind",)
    search_fields = ("=id", "=task__id")


@admin.register(models.InboxRecord)
class InboxRecordAdmin(RecordAdmin):
    list_display = ("id", "instance", "source_kind", "state", "disposition", "created_at", "consumed_at")
    list_filter = ("state", "source_kind", "disposition")
    search_fields = ("=id", "=instance__id", "=source_id")


@admin.register(models.PollRound)
class PollRoundAdmin(RecordAdmin):
    list_display = ("id", "activation", "round", "task", "created_at")
    search_fields = ("=id", "=activation__id", "=instance__id")


@admin.register(models.Wait)
class WaitAdmin(RecordAdmin):
    list_display = ("id", "step", "kind", "generation", "state", "deadline_at", "winner_signal")
    list_select_related = ("step",)
    list_filter = ("kind", "state")
    search_fields = ("=id", "=instance__id")


@admin.register(models.Continuation)
class ContinuationAdmin(RecordAdmin):
    list_display = ("id", "instance", "step_key", "kind", "state", "created_at", "applied_at")
    list_filter = ("state",)
    search_fields = ("=id", "=instance__id")
