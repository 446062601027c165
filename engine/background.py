"""Keeping the long-running background alive through a database outage, and its heartbeat."""

import datetime as dt
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable

from django import db
from django.db import connection

from core import clock
from history.background import background_process_beat, background_process_start
from history.models import BackgroundProcess, ProcessKind

log = logging.getLogger("weave.background")

BACKOFF_SECONDS = (0.5, 1, 2, 5, 10)
# A busy or idle process finishes many passes a second (a worker's threads each claim): its row is written
# at most this often, which is plenty against a staleness measured in tens of seconds.
BEAT_EVERY = dt.timedelta(seconds=1)


class Outage:
    """Runs one unit of background work; a database error (a lost connection's InterfaceError too)
    is logged, the connection dropped and the next attempt delayed (growing to 10 s), instead of
    ending the process. The unit's own transaction has rolled back, so whatever it was doing is
    still due and is found again."""

    def __init__(self, what: str, stopping: threading.Event) -> None:
        self.what, self.stopping, self.failures = what, stopping, 0

    def run(self, work):
        try:
            result = work()
        except db.Error as error:
            delay = BACKOFF_SECONDS[min(self.failures, len(BACKOFF_SECONDS) - 1)]
            self.failures += 1
            log.warning("%s: database error (%s); retrying in %s s", self.what, error.__class__.__name__, delay)
            connection.close()
            self.stopping.wait(delay)
            return None
        self.failures = 0
        return result


class ProcessBeat:
    """This process's heartbeat row (``history.background``): inserted at ``start``, its last beat and counts
    written after a pass at most once per ``BEAT_EVERY`` (one UPDATE), and its stop time at a clean exit.

    The counts live here, so a write that meets a database outage (raised like any unit of work, for
    ``Outage`` to back off) loses nothing: the next write carries them. A worker's threads share one; its
    writes are made one at a time, so the row's counts only grow.
    """

    def __init__(self, kind: ProcessKind, *, queue: str = "", namespace_id: str | None = None) -> None:
        self.process = BackgroundProcess(
            kind=kind, host=socket.gethostname()[:255], pid=os.getpid(), queue=queue, namespace_id=namespace_id
        )
        self.process.beat_at = self.process.started_at
        self._lock = threading.Lock()
        self._written_at: dt.datetime | None = None

    def start(self) -> None:
        with self._lock:
            background_process_start(process=self.process)
            self._written_at = clock.now()

    def beat(self, items: int) -> None:
        """Count one finished pass that handled ``items``; write the row unless it was written within ``BEAT_EVERY``."""
        with self._lock:
            now = clock.now()
            self.process.passes += 1
            self.process.items += items
            self.process.beat_at = now
            if self._written_at is not None and now - self._written_at < BEAT_EVERY:
                return
            background_process_beat(process=self.process)
            self._written_at = now

    def stop(self) -> None:
        """Record a clean exit; the database being down then is logged, not raised: the process ends either way."""
        with self._lock:
            self.process.stopped_at = clock.now()
            try:
                background_process_beat(process=self.process)
            except db.Error as error:
                log.warning("%s: the stop was not recorded (%s)", self.process, error.__class__.__name__)


def serve_passes(
    kind: ProcessKind, one_pass: Callable[[], dict[str, int]], *, once: bool, interval: float, write
) -> None:
    """A single-threaded background process: ``one_pass`` again and again (waiting ``interval`` after an idle one)
    until SIGTERM or Ctrl-C, through database outages, with its heartbeat; with ``once``, one pass, its counts
    written by ``write``."""
    beat = ProcessBeat(kind)

    def counted() -> dict[str, int]:
        counts = one_pass()
        beat.beat(sum(counts.values()))
        return counts

    if once:
        beat.start()
        write(" ".join(f"{name}={count}" for name, count in counted().items()))
        beat.stop()
        return
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    outage = Outage(f"weave_{kind}", stopping)
    outage.run(beat.start)  # missed in an outage, the row is inserted by the first beat written
    try:
        while not stopping.is_set():
            counts = outage.run(counted)
            if counts is not None and not any(counts.values()):
                stopping.wait(interval)  # the connection stays open for the next pass
    except KeyboardInterrupt:
        pass
    beat.stop()
