"""The writes of the background's heartbeats: each runner and worker process keeps its own row.

Each write is one statement in autocommit, outside any transaction of the engine: a heartbeat is never
rolled back with the work it reports, and never holds a lock beyond its own statement.
"""

import datetime as dt

from core import clock
from history.models import BackgroundProcess

# A starting process deletes the rows of processes silent this long (stopped or killed), at most a batch of
# them: the table holds the processes of the last week, however often they restart.
FORGET_AFTER = dt.timedelta(days=7)
FORGET_BATCH = 1000


def background_process_start(*, process: BackgroundProcess) -> None:
    """Insert the row of a starting process, after deleting the rows of processes silent for ``FORGET_AFTER``.

    The silent rows are found by a plain read and deleted by key: a DELETE over a range of the beat index
    would lock index entries the running processes' beats move, and deadlock with them on MariaDB.
    """
    cutoff = clock.now() - FORGET_AFTER
    silent = list(BackgroundProcess.objects.filter(beat_at__lt=cutoff).values_list("pk", flat=True)[:FORGET_BATCH])
    if silent:
        BackgroundProcess.objects.filter(pk__in=silent, beat_at__lt=cutoff).delete()
    process.save(force_insert=True)


def background_process_beat(*, process: BackgroundProcess) -> None:
    """Write the process's last beat, counts and stop time as they are in memory: one UPDATE.

    A row the update does not find (the start's insert met a database outage) is inserted then.
    """
    written = BackgroundProcess.objects.filter(pk=process.pk).update(
        beat_at=process.beat_at, passes=process.passes, items=process.items, stopped_at=process.stopped_at
    )
    if not written:
        process.save(force_insert=True)
