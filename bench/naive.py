"""The obvious first version a Django team would write: ListAPIView + LimitOffsetPagination.

It exists only to be measured against the product's keyset pages; nothing outside bench/ uses it.
"""

import datetime as dt

import django_filters
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import generics, serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer

from history import models


class Page(LimitOffsetPagination):
    default_limit = 20
    max_limit = 100


def _list_view(model, fields, ordering, parent_filter):
    class Serializer(serializers.ModelSerializer):
        class Meta:
            pass

    Serializer.Meta.model = model
    Serializer.Meta.fields = fields

    class View(generics.ListAPIView):
        serializer_class = Serializer
        pagination_class = Page
        permission_classes = [AllowAny]
        authentication_classes = []
        renderer_classes = [JSONRenderer]

        def get_queryset(self):
            return model.objects.filter(**parent_filter(self.kwargs)).order_by(*ordering)

    return View.as_view()


activations = _list_view(
    models.Activation,
    ["id", "step", "sequence", "state", "revision", "task", "created_at", "updated_at", "completed_at"],
    ["-sequence"],
    lambda kw: {"instance_id": kw["id"], "step__key": kw["key"]},
)
rounds = _list_view(
    models.PollRound,
    ["id", "activation", "round", "task", "created_at"],
    ["-round", "-id"],
    lambda kw: {"activation_id": kw["activation"]},
)
signals = _list_view(
    models.Signal,
    ["id", "workflow", "revision", "name", "payload_version", "target_step_key", "state", "accepted_at"],
    ["-accepted_at", "-id"],
    lambda kw: {"workflow_id": kw["id"]},
)


class InstanceFilter(django_filters.FilterSet):
    """The instance query's filters as plain field lookups."""

    state = django_filters.MultipleChoiceFilter(choices=models.InstanceState.choices)
    review_cause = django_filters.MultipleChoiceFilter(choices=models.ReviewCause.choices)
    definition = django_filters.CharFilter(field_name="definition__name")
    version = django_filters.NumberFilter(field_name="definition__version")
    business_key = django_filters.CharFilter()
    business_key_prefix = django_filters.CharFilter(field_name="business_key", lookup_expr="startswith")
    paused = django_filters.BooleanFilter()
    stop_kind = django_filters.CharFilter()
    queue = django_filters.CharFilter(method="queue_filter")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gt")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    updated_after = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="gt")
    updated_before = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    in_review_longer_than = django_filters.NumberFilter(method="review_filter")
    order = django_filters.ChoiceFilter(
        choices=[(n, n) for n in ("updated_at", "created_at", "review_since")], method="order_filter"
    )

    class Meta:
        model = models.WorkflowInstance
        fields: list[str] = []

    def queue_filter(self, queryset, name, value):
        return queryset.filter(definition__queues__contains=[value])

    def review_filter(self, queryset, name, value):
        return queryset.filter(review_since__lt=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(value)))

    def order_filter(self, queryset, name, value):
        if value == "review_since":
            queryset = queryset.filter(review_since__isnull=False)
        return queryset.order_by(f"-{value}", "-id")


class InstanceSerializer(serializers.ModelSerializer):
    definition = serializers.SerializerMethodField()

    class Meta:
        model = models.WorkflowInstance
        fields = [
            "id",
            "definition",
            "state",
            "review_cause",
            "review_step_key",
            "paused",
            "stop_kind",
            "business_key",
            "revision",
            "created_at",
            "updated_at",
            "review_since",
        ]

    def get_definition(self, instance):
        return {"name": instance.definition.name, "version": instance.definition.version}


class InstanceList(generics.ListAPIView):
    serializer_class = InstanceSerializer
    pagination_class = Page
    permission_classes = [AllowAny]
    authentication_classes = []
    renderer_classes = [JSONRenderer]
    filter_backends = [DjangoFilterBackend]
    filterset_class = InstanceFilter
    queryset = models.WorkflowInstance.objects.select_related("definition").order_by("-updated_at", "-id")


instances = InstanceList.as_view()
