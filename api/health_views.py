"""The health of a deployment: the process is alive (GET /healthz), it may take requests (GET /readyz), and the
background runs (GET /v1/background).

The two probes answer anyone, without a token: no credential, session or CSRF check runs, and they write
nothing. /healthz does no I/O at all; /readyz asks the database only (never the background).
"""

from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from api import schema
from api.params import no_params
from api.permissions import scope_required
from api.resources import background, health
from core.readiness import readiness
from history.models import Scope
from history.selectors.background import background_status


class ProbeView(APIView):
    authentication_classes = []
    permission_classes = []
    # No middleware reads the session for it (console/zone.py), whatever cookie the caller brings.
    sessionless = True
    # A load balancer may probe with HEAD.
    http_method_names = ["get", "head"]


class LivenessView(ProbeView):
    @extend_schema(
        operation_id="get_liveness",
        summary="The process answers: 200 while it runs, whatever its database (for a liveness probe)",
        tags=["health"],
        auth=[],
        responses=health.LIVENESS_RESPONSES,
    )
    def get(self, request):
        return Response(health.liveness())


class ReadinessView(ProbeView):
    @extend_schema(
        operation_id="get_readiness",
        summary="The process may take requests: its database answers within WEAVE_READY_TIMEOUT_SECONDS, every "
        "migration is applied and a Galera node is synced (for a readiness probe)",
        tags=["health"],
        auth=[],
        responses=health.READINESS_RESPONSES,
    )
    def get(self, request):
        body, status = health.readiness(readiness(connection))
        return Response(body, status=status)


class BackgroundView(APIView):
    http_method_names = ["get"]
    permission_classes = [scope_required(Scope.READ)]

    @extend_schema(
        operation_id="get_background",
        summary="The runner and worker processes and their last beats: which are alive, which are stale",
        responses=schema.responses(background.Background, errors=[400, 401, 403, 503]),
    )
    def get(self, request):
        no_params(request.query_params)
        return Response(background.background(background_status(identity=request.auth)))
