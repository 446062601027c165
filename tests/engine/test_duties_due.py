"""The runner's probe (``duties_due``): one statement says which duties have rows to look at, a duty it finds
idle is not run, and a long-running runner paces the watchdog."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from engine import runner
from history.models import Step, StepState
from testkit import states

# A state each probed engine duty has work in, as the engine reaches it.
PREPARED = {
    "lease_expiry": states.leases_expired,
    "instance_deadlines": states.instances_late,
    "timers": states.timers_due,
    "wait_deadlines": states.waits_late,
    "inbox": states.results_pending,
    "poll_rounds": states.poll_rounds_due,
    "continuations": states.started,
    "stop_settlement": states.instances_cancelled,
}


def _settled_idle():
    runner.runner_settle()
    assert runner.duties_due(runner.DUE) == set()


@pytest.mark.django_db
@pytest.mark.parametrize("duty", PREPARED)
def test_a_duty_with_work_is_found_due_and_runs_and_a_settled_runner_finds_none(engine, duty):
    PREPARED[duty](engine)
    assert duty in runner.duties_due(runner.DUE)
    assert runner.runner_pass()[duty] >= 1
    _settled_idle()


@pytest.mark.django_db
@pytest.mark.parametrize("duty", PREPARED)
def test_every_duty_the_probe_finds_idle_would_have_handled_nothing(engine, duty):
    PREPARED[duty](engine)
    idle = set(runner.DUE) - runner.duties_due(runner.DUE)
    assert duty not in idle
    assert {name: runner.PASSES[name]() for name in idle} == dict.fromkeys(idle, 0)


@pytest.mark.django_db
def test_an_idle_pass_is_one_statement_when_the_watchdog_rests(engine):
    states.results_pending(engine)
    _settled_idle()
    with CaptureQueriesContext(connection) as captured:
        counts = runner.runner_pass(skip={"watchdog"})
    assert len(captured) == 1 and captured[0]["sql"].startswith("SELECT (EXISTS(")
    assert counts == dict.fromkeys(runner.PASSES, 0)


@pytest.mark.django_db
def test_work_one_duty_makes_is_done_by_the_later_duties_of_the_same_pass(engine):
    """The probe is read again after a duty handled something: the continuation a fired timer leaves is applied
    in the same pass, as when every duty ran every pass."""
    states.timers_due(engine)
    assert runner.duties_due(runner.DUE) == {"timers"}
    counts = runner.runner_pass()
    assert counts["timers"] == 1 and counts["continuations"] == 1
    assert Step.objects.get(key="t").state == StepState.SUCCEEDED
    _settled_idle()


@pytest.mark.django_db
def test_a_duty_in_skip_is_not_run_and_counts_nothing(engine):
    states.started(engine)
    counts = runner.runner_pass(skip={"continuations"})
    assert counts["continuations"] == 0
    assert "continuations" in runner.duties_due(runner.DUE)


def test_the_paced_watchdog_rests_until_its_seconds_have_passed_on_the_clock():
    pace = runner.Pace()
    assert pace.resting() == set()
    assert pace.resting() == {"watchdog"}
    clock.advance(dt.timedelta(seconds=runner.PACED_SECONDS["watchdog"]) - dt.timedelta(milliseconds=1))
    assert pace.resting() == {"watchdog"}
    clock.advance(dt.timedelta(milliseconds=1))
    assert pace.resting() == set()
    assert pace.resting() == {"watchdog"}


@pytest.mark.django_db
def test_the_probe_is_built_once_and_asks_at_the_time_of_each_call(engine, monkeypatch):
    states.timers_due(engine)
    built = []
    monkeypatch.setitem(runner.DUE, "timers", lambda now, due=runner.DUE["timers"]: built.append(now) or due(now))
    names = ("lease_expiry", "timers", "continuations")
    with clock.moved(-dt.timedelta(seconds=11)):
        assert runner.duties_due(names) == set()  # before the timer fires
    assert runner.duties_due(names) == {"timers"}
    with clock.moved(-dt.timedelta(seconds=11)):
        assert runner.duties_due(names) == set()
    assert len(built) == 2  # twice at its one compile (two stand-ins of the time), never again
