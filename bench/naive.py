"""The obvious first version a Django team would write: ListAPIView + LimitOffsetPagination.

It exists only to be measured against the product's keyset pages; nothing outside bench/ uses it.
"""

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
