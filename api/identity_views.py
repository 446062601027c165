from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema


class CredentialSelfView(APIView):
    """GET /v1/credentials/self — who this bearer token acts as."""

    @extend_schema(operation_id="get_credential_self", responses=schema.responses(schema.CredentialSelf, errors=(401,)))
    def get(self, request):
        identity = request.auth
        return Response(
            {
                "credential_id": identity.credential_id,
                "namespace_id": identity.namespace_id,
                "actor_id": identity.actor_id,
                "scopes": sorted(identity.scopes),
                "queues": "*" if identity.queues is None else sorted(identity.queues),
            }
        )
