"""The one clock of the engine and the services.

Everything that stamps or compares time calls ``now()``. Tests and the demo move it
with ``advance()`` / ``set_offset()`` instead of sleeping; the offset is process-local.
"""

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone

_offset = dt.timedelta(0)


def now() -> dt.datetime:
    return timezone.now() + _offset


def advance(delta: dt.timedelta) -> None:
    global _offset
    _offset += delta


def set_offset(offset: dt.timedelta) -> None:
    global _offset
    _offset = offset


@contextmanager
def moved(delta: dt.timedelta) -> Iterator[None]:
    """Run a block with the clock moved by ``delta``, then put it back."""
    advance(delta)
    try:
        yield
    finally:
        advance(-delta)
