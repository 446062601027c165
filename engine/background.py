"""Keeping the long-running background alive through a database outage."""

import logging
import threading

from django import db
from django.db import connection

log = logging.getLogger("weave.background")

BACKOFF_SECONDS = (0.5, 1, 2, 5, 10)


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
