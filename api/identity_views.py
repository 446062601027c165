from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.resources import credentials


class CredentialSelfView(APIView):
    """GET /v1/credentials/self — who this bearer token acts as."""

    @extend_schema(
        operation_id="get_credential_self", responses=schema.responses(credentials.CredentialSelf, errors=(401,))
    )
    def get(self, request):
        return Response(credentials.credential_self(request.auth))
