"""The console's list filters: by definition and by queue (lists of small tables, never a DISTINCT over a big
one), and a time range."""

import datetime as dt

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils import timezone

from console.admins.base import scoped
from core.identity import identity_of_user
from history import models


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


class NamespacedValuesFilter(admin.AllValuesFieldListFilter):
    """The values a column holds, read as (namespace, value) pairs from an index that leads with both: MariaDB
    reads one index entry per pair. Django's own DISTINCT of the value alone reads every row of the list.

    An operator is offered the values of its namespace's rows, not only of those it sees (which list them, as
    ever): for one of named queues the rows it sees are checked one by one against their instance, every row of
    the list read for a handful of names (an action's name, such as workflow.pause, names no instance)."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        identity = identity_of_user(request.user)
        if identity is None:
            rows = model_admin.get_queryset(request)  # a bare superuser's every namespace, or nothing
        else:
            rows = model._default_manager.filter(namespace_id=identity.namespace_id)
        pairs = rows.order_by().values_list("namespace_id", field_path).distinct()
        self.lookup_choices = sorted({value for _, value in pairs})


class TimeRangeFilter(admin.FieldListFilter):
    """From (inclusive) and to (exclusive) on a datetime column, in the viewer's zone.

    Two native ``datetime-local`` inputs and no script, so the admin keeps ``script-src 'self'`` (date range
    packages for the admin inject inline scripts). A value that is not a date and time is refused naming it.
    """

    template = "admin/console/time_range_filter.html"

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.bounds = {"from": f"{field_path}__gte", "to": f"{field_path}__lt"}
        super().__init__(field, request, params, model, model_admin, field_path)
        self.request = request

    def expected_parameters(self):
        return list(self.bounds.values())

    def queryset(self, request, queryset):
        for name, lookup in self.bounds.items():
            value = self.used_parameters.get(lookup)
            if value is None:
                continue
            value = value[-1] if isinstance(value, list) else value
            try:
                moment = dt.datetime.fromisoformat(value)
            except ValueError:
                message = f"Filter {lookup} ({name}): {value!r} is not a date and time (YYYY-MM-DDTHH:MM[:SS])"
                messages.error(request, message)
                raise IncorrectLookupParameters(value) from None
            if timezone.is_naive(moment):
                moment = timezone.make_aware(moment)
            queryset = queryset.filter(**{lookup: moment})
        return queryset

    def choices(self, changelist):
        kept = {k: v for k, v in changelist.get_filters_params().items() if k not in self.bounds.values()}
        values = {name: _last(self.used_parameters.get(lookup, "")) for name, lookup in self.bounds.items()}
        yield {
            "bounds": [(name, lookup, values[name]) for name, lookup in self.bounds.items()],
            "kept": [(k, v) for k, vs in kept.items() for v in (vs if isinstance(vs, list) else [vs])],
            "zone": timezone.get_current_timezone_name(),
            "clear": changelist.get_query_string(remove=list(self.bounds.values())),
            "selected": any(values.values()),
        }


def _last(value):
    return value[-1] if isinstance(value, list) and value else value
