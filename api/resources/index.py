"""The index of the API (GET /v1/): what it is, and where its description and its main collections are."""

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers


class ApiLinks(serializers.Serializer):
    docs = serializers.CharField(help_text="Swagger UI of the OpenAPI document")
    schema = serializers.CharField(help_text="the OpenAPI document")
    workflows = serializers.CharField(help_text="the workflow instances: query (GET) and start (POST)")
    review_summary = serializers.CharField(help_text="the instances in review, counted by cause")
    credential_self = serializers.CharField(help_text="who the bearer token acts as")


class ApiIndex(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.CharField(help_text="the API's version, as in the OpenAPI document's info")
    links = ApiLinks(
        help_text="paths on this server: docs is a page (HTML), schema the bare OpenAPI document, the others answer "
        "in the envelope"
    )


# Link name → URL name in api/urls.py: a route moved there moves here with it.
_LINKS = {
    "docs": "openapi-docs",
    "schema": "openapi-schema",
    "workflows": "workflows",
    "review_summary": "review-summary",
    "credential_self": "credential-self",
}


def api_index() -> dict:
    return {
        "name": settings.SPECTACULAR_SETTINGS["TITLE"],
        "version": settings.SPECTACULAR_SETTINGS["VERSION"],
        "links": {link: reverse(name) for link, name in _LINKS.items()},
    }
