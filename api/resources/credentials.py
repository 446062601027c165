"""The credential a bearer token acts as."""

from rest_framework import serializers

from api.schema import IdField
from core.identity import Identity


class CredentialSelf(serializers.Serializer):
    credential_id = IdField()
    namespace_id = IdField()
    actor_id = IdField()
    scopes = serializers.ListField(child=serializers.CharField())
    queues = serializers.JSONField(help_text='"*" for every queue of the namespace, else a list of names')


def credential_self(identity: Identity) -> dict:
    return {
        "credential_id": identity.credential_id,
        "namespace_id": identity.namespace_id,
        "actor_id": identity.actor_id,
        "scopes": sorted(identity.scopes),
        "queues": "*" if identity.queues is None else sorted(identity.queues),
    }
