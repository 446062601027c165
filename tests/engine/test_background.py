"""The runner and the workers outlive a database outage instead of exiting."""

import pytest
from django.db import OperationalError

from engine.background import BACKOFF_SECONDS, Outage
from tests.engine.conftest import StoppingRecorder


def test_a_database_error_is_logged_and_backed_off_and_the_next_unit_runs(caplog):
    stopping = StoppingRecorder()
    outage = Outage("weave_runner", stopping)
    calls = iter([OperationalError("server has gone away"), OperationalError("again"), {"inbox": 1}])

    def work():
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert outage.run(work) is None
    assert outage.run(work) is None
    assert outage.run(work) == {"inbox": 1}
    assert stopping.waited == list(BACKOFF_SECONDS[:2])
    assert outage.failures == 0
    assert [r.getMessage() for r in caplog.records] == [
        "weave_runner: database error (OperationalError); retrying in 0.5 s",
        "weave_runner: database error (OperationalError); retrying in 1 s",
    ]


def test_the_backoff_stops_growing_at_its_last_step():
    stopping = StoppingRecorder()
    outage = Outage("w", stopping)

    def down():
        raise OperationalError("down")

    for _ in range(len(BACKOFF_SECONDS) + 3):
        outage.run(down)
    assert stopping.waited[-4:] == [BACKOFF_SECONDS[-1]] * 4


def test_an_error_that_is_not_the_database_still_ends_the_process():
    outage = Outage("w", StoppingRecorder())

    def broken():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        outage.run(broken)
