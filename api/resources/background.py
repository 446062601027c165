"""The background's status: its runner and worker processes, each with its last beat (GET /v1/background)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.resources import optional, optional_time
from api.schema import IdField, TimeField
from core.times import format_time
from history.models import ProcessKind
from history.selectors.background import MAX_PROCESSES, BackgroundStatus, ProcessStatus


# A component of its own: an inline enum would share the name "kind" with the event kinds' and rename theirs.
@extend_schema_field({"type": "string", "enum": list(ProcessKind.values)}, component_name="ProcessKind")
class ProcessKindField(serializers.CharField):
    pass


class BackgroundProcess(serializers.Serializer):
    id = IdField()
    kind = ProcessKindField()
    host = serializers.CharField()
    pid = serializers.IntegerField(min_value=0)
    queue = serializers.CharField(required=False, help_text="a worker's queue")
    started_at = TimeField()
    beat_at = TimeField(help_text="when the process last finished a pass")
    age_seconds = serializers.IntegerField(min_value=0, help_text="whole seconds since beat_at")
    stale = serializers.BooleanField(help_text="not stopped, and beat_at older than stale_after_seconds")
    stopped_at = TimeField(required=False, help_text="a clean exit (SIGTERM, Ctrl-C); a killed process has none")
    passes = serializers.IntegerField(min_value=0, help_text="passes finished since started_at")
    items = serializers.IntegerField(min_value=0, help_text="items handled (a runner's) or tasks run (a worker's)")


class BackgroundSummary(serializers.Serializer):
    runners_alive = serializers.IntegerField(min_value=0, help_text="runners neither stopped nor stale")
    workers_alive = serializers.IntegerField(min_value=0, help_text="workers neither stopped nor stale")
    stale = serializers.IntegerField(min_value=0, help_text="processes not stopped whose beat is stale")


class Background(serializers.Serializer):
    processes = BackgroundProcess(
        many=True,
        help_text="every runner, and the workers of the caller's namespace on queues it may access, running or "
        f"stopped in the last hour, the most recent beat first (at most {MAX_PROCESSES})",
    )
    summary = BackgroundSummary()
    stale_after_seconds = serializers.IntegerField(min_value=1, help_text="WEAVE_HEARTBEAT_STALE_SECONDS")


def _process(status: ProcessStatus) -> dict:
    process = status.process
    data = {"id": process.id, "kind": process.kind, "host": process.host, "pid": process.pid}
    optional(data, "queue", process.queue)
    data |= {
        "started_at": format_time(process.started_at),
        "beat_at": format_time(process.beat_at),
        "age_seconds": int(status.age.total_seconds()),
        "stale": status.stale,
    }
    optional_time(data, "stopped_at", process.stopped_at)
    return data | {"passes": process.passes, "items": process.items}


def background(status: BackgroundStatus) -> dict:
    return {
        "processes": [_process(process) for process in status.processes],
        "summary": {
            "runners_alive": status.runners_alive,
            "workers_alive": status.workers_alive,
            "stale": status.stale,
        },
        "stale_after_seconds": int(status.stale_after.total_seconds()),
    }
