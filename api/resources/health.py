"""The probes of a load balancer or an orchestrator: the process is alive (GET /healthz) and ready (GET /readyz)."""

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from api.schema import ErrorBody, IdField, envelope
from core.errors import Unavailable
from core.readiness import Check


class Liveness(serializers.Serializer):
    alive = serializers.BooleanField(help_text="always true: the process answers")


def liveness() -> dict:
    return {"alive": True}


class ReadinessCheck(serializers.Serializer):
    name = serializers.CharField(
        help_text="database (answers within WEAVE_READY_TIMEOUT_SECONDS), migrations (every one applied) or "
        "cluster (a Galera node only: wsrep_ready ON and Synced)"
    )
    ok = serializers.BooleanField()
    detail = serializers.CharField()


class Readiness(serializers.Serializer):
    ready = serializers.BooleanField(help_text="always true in a 200")
    checks = ReadinessCheck(many=True)


class NotReadyError(ErrorBody):
    """The error of the envelope (UNAVAILABLE, its message naming the failed checks), and every check made."""

    checks = ReadinessCheck(many=True, help_text="every check made; a database that does not answer is the only one")


class NotReadyEnvelope(serializers.Serializer):
    request_id = IdField()
    error = NotReadyError()


LIVENESS_RESPONSES = {200: envelope(Liveness)}
READINESS_RESPONSES = {
    200: envelope(Readiness),
    503: OpenApiResponse(NotReadyEnvelope, description="UNAVAILABLE: a check failed; each is listed"),
}


def _check(check: Check) -> dict:
    return {"name": check.name, "ok": check.ok, "detail": check.detail}


def readiness(checks: list[Check]) -> tuple[dict, int]:
    """The body and status of a readiness answer: 200 when every check passed, else 503 naming the failed ones."""
    listed = [_check(check) for check in checks]
    failed = [check.name for check in checks if not check.ok]
    if not failed:
        return {"ready": True, "checks": listed}, 200
    error = Unavailable(f"not ready: {', '.join(failed)}")
    return {"error": error.as_dict() | {"checks": listed}}, error.status
