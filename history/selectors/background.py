"""The background's status: its runner, worker and notifier processes and how long ago each last finished a pass.

One query, for the API (GET /v1/background), the console's home and the metrics exporter alike. A process
is stale when its last beat is older than ``WEAVE_HEARTBEAT_STALE_SECONDS`` by the engine's clock, and
alive when it has neither stopped nor gone stale.
"""

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from core import clock
from core.identity import Identity
from history.models import BackgroundProcess, ProcessKind

# Besides the processes still running, those that stopped this recently (a restart shows as one stop, one start).
RECENTLY_STOPPED = dt.timedelta(hours=1)
MAX_PROCESSES = 200


@dataclass(frozen=True)
class ProcessStatus:
    process: BackgroundProcess
    # Since the last beat; never negative (another host's clock may run ahead of this one).
    age: dt.timedelta
    stale: bool


@dataclass(frozen=True)
class BackgroundStatus:
    processes: list[ProcessStatus]
    runners_alive: int
    workers_alive: int
    stale: int
    stale_after: dt.timedelta


def background_status(*, identity: Identity | None) -> BackgroundStatus:
    """The processes running or stopped within ``RECENTLY_STOPPED``, the most recent beat first (at most
    ``MAX_PROCESSES``), counted into runners and workers alive and processes stale.

    An identity sees every runner and notifier (each serves every namespace) and the workers of its own namespace on
    queues it may access; None is the operator's view of every process (the metrics exporter).
    """
    now = clock.now()
    stale_after = dt.timedelta(seconds=settings.WEAVE_HEARTBEAT_STALE_SECONDS)
    rows = BackgroundProcess.objects.filter(Q(stopped_at=None) | Q(stopped_at__gte=now - RECENTLY_STOPPED))
    if identity is not None:
        workers = Q(kind=ProcessKind.WORKER, namespace_id=identity.namespace_id)
        if identity.queues is not None:
            workers &= Q(queue__in=identity.queues)
        rows = rows.filter(Q(kind__in=(ProcessKind.RUNNER, ProcessKind.NOTIFIER)) | workers)
    processes = [
        ProcessStatus(
            process=row,
            age=max(now - row.beat_at, dt.timedelta(0)),
            stale=row.stopped_at is None and row.beat_at < now - stale_after,
        )
        for row in rows.order_by("-beat_at", "-id")[:MAX_PROCESSES]
    ]
    alive = [p.process.kind for p in processes if p.process.stopped_at is None and not p.stale]
    return BackgroundStatus(
        processes=processes,
        runners_alive=alive.count(ProcessKind.RUNNER),
        workers_alive=alive.count(ProcessKind.WORKER),
        stale=sum(p.stale for p in processes),
        stale_after=stale_after,
    )
