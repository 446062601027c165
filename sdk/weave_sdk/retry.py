"""When the client sends a request again, and how long it waits first.

Only a request that cannot have a second effect is sent again: a read (GET), or a write carrying
its Idempotency-Key, whose replay the server answers with the receipt frozen by the first. It is
sent again after a transport error (no answer) or a 503 UNAVAILABLE (the database or a cluster
node was unavailable; nothing was written). Never after 429 RESOURCE_EXHAUSTED: that is a full
quota of active tasks, not a rate, and it frees only when a task of the application or queue
finishes, which no backoff can time (the refusal stored nothing: the same call with the same key
may be made later).
"""

import datetime as dt
import email.utils
import functools
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_SECONDS = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class Retry:
    """Bounded re-sending with exponential backoff and jitter.

    ``attempts`` counts every send, the first included (1: never again). Before send n+1 the client
    waits between half and all of ``min(max_wait, first_wait * 2**(n-1))`` seconds (the share drawn
    by ``random``), or exactly what the answer's ``Retry-After`` asks (seconds or an HTTP date, read
    against ``now``). The waits of one call add up to at most ``total_wait``: a wait that would pass
    it ends the re-sending, and the last error is raised. ``sleep``, ``now`` and ``random`` are
    here so that a test can run without waiting.
    """

    attempts: int = 5
    first_wait: float = 0.5
    max_wait: float = 8.0
    total_wait: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], dt.datetime] = functools.partial(dt.datetime.now, dt.UTC)
    random: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError("attempts must be an integer of at least 1")
        if not 0 <= self.first_wait <= self.max_wait or self.total_wait < 0:
            raise ValueError("waits must satisfy 0 <= first_wait <= max_wait and total_wait >= 0")

    def wait(self, sent: int, retry_after: str | None) -> float:
        """Seconds to wait after the ``sent``-th send failed, before the next one."""
        asked = self._retry_after(retry_after) if retry_after is not None else None
        if asked is not None:
            return asked
        step = min(self.max_wait, self.first_wait * 2 ** (sent - 1))
        return step / 2 + step / 2 * self.random()

    def _retry_after(self, value: str) -> float | None:
        value = value.strip()
        if _SECONDS.fullmatch(value):
            return float(value)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None  # unreadable: the backoff decides
        if when.tzinfo is None:
            return None
        return max(0.0, (when - self.now()).total_seconds())
