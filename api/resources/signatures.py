"""Failure signatures: what made instances enter review, apart from the instances (``GET /v1/signatures``)."""

from rest_framework import serializers

from api.resources import paged
from api.resources.instances import DefinitionRef, definition_ref
from api.schema import IdField, TimeField
from core.times import format_time
from history.selectors.signatures import SignaturePage


class SignatureItem(serializers.Serializer):
    id = IdField(help_text="the signature's id: the instance query's signature filter")
    definition = DefinitionRef()
    step_key = serializers.CharField(help_text="the step it concerns; blank for an instance-wide cause")
    review_cause = serializers.CharField()
    pattern = serializers.CharField(help_text="the review reason with its ids, numbers, times and quoted values as <*>")
    sample = serializers.CharField(help_text="the review reason of its first arrival, as the engine wrote it")
    first_seen = TimeField()
    last_seen = TimeField()
    count = serializers.IntegerField(min_value=1, help_text="how many times an instance entered review with it")
    knock_on = serializers.IntegerField(
        min_value=0,
        help_text="of those, the arrivals of instances that had first entered review with another signature: "
        "a consequence of that one (its root), not a cause of its own",
    )
    in_review = serializers.IntegerField(min_value=0, help_text="visible instances in review with it now")


class SignaturePageSerializer(serializers.Serializer):
    items = SignatureItem(many=True)
    next_cursor = serializers.CharField(required=False)


def signature_page(result: SignaturePage, *, next_cursor: str | None) -> dict:
    items = [
        {
            "id": signature.id,
            "definition": definition_ref(result.definitions[signature.definition_id]),
            "step_key": signature.step_key,
            "review_cause": signature.review_cause,
            "pattern": signature.pattern,
            "sample": signature.sample,
            "first_seen": format_time(signature.first_seen),
            "last_seen": format_time(signature.last_seen),
            "count": signature.count,
            "knock_on": signature.knock_on,
            "in_review": result.in_review.get(signature.id, 0),
        }
        for signature in result.page.items
    ]
    return paged({}, items=items, next_cursor=next_cursor)
