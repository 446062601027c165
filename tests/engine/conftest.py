"""Engine test fixtures: quota rows, a backoff recorder."""

import threading

import pytest

from history.models import Application, Queue


@pytest.fixture
def quota_rows(engine):
    def rows():
        return (
            Application.objects.get(pk=engine.application.id),
            {q.name: q for q in Queue.objects.filter(namespace=engine.namespace)},
        )

    return rows


class StoppingRecorder(threading.Event):
    """Records each backoff instead of sleeping it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout=None):
        self.waited.append(timeout)
        return False
