"""Engine test fixtures: quota rows, the clock reset around each test, a backoff recorder."""

import datetime as dt
import threading

import pytest

from core import clock
from history.models import Application, Queue


@pytest.fixture
def quota_rows(engine):
    def rows():
        return (
            Application.objects.get(pk=engine.application.id),
            {q.name: q for q in Queue.objects.filter(namespace=engine.namespace)},
        )

    return rows


@pytest.fixture(autouse=True)
def _clock_reset():
    """Tests move the one clock; every test starts and ends at the real time."""
    clock.set_offset(dt.timedelta(0))
    yield
    clock.set_offset(dt.timedelta(0))


class StoppingRecorder(threading.Event):
    """Records each backoff instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout=None):
        self.waited.append(timeout)
        return False
