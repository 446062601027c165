"""GET /v1/: the index of the API, answered to anyone, without a token (as the OpenAPI document is)."""

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.params import no_params
from api.resources import index


class ApiIndexView(APIView):
    # No credential is read: a token, valid or not, changes nothing.
    authentication_classes = []
    permission_classes = []
    http_method_names = ["get"]

    @extend_schema(
        operation_id="get_api_index",
        summary="The API's name and version, and the paths of its documentation, its OpenAPI document and its main "
        "collections",
        tags=["index"],
        auth=[],
        responses=schema.responses(
            index.ApiIndex, errors={400: "INVALID_ARGUMENT: a query parameter (none is taken; the parameter named)"}
        ),
    )
    def get(self, request):
        no_params(request.query_params)
        return Response(index.api_index())
