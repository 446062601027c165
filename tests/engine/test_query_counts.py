"""Each runner pass costs a fixed number of queries per item, whatever the history size.

The measured numbers are the ones the README reports (``pytest -s`` prints them).
"""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine import runner
from engine.handlers import claim_execute
from engine.instances import instance_cancel
from engine.signals import signal_accept
from history import clock
from tests.engine.conftest import task_step
from tests.engine.test_poll import poll_step


def _queries(run) -> int:
    with CaptureQueriesContext(connection) as captured:
        run()
    return len(captured)


def _cost(prepare, run_pass) -> tuple[int, int]:
    """(idle pass, per item) for a pass, checked to be exactly linear in the number of items."""
    idle = _queries(run_pass)
    counts = []
    for items in (1, 3):
        prepare(items)
        counts.append(_queries(run_pass) - idle)
    one, three = counts
    assert three == 3 * one, f"per-item cost is not constant: 1 item {one}, 3 items {three}"
    return idle, one


def _started(engine, definition, items, **input_value):
    return [engine.start(definition, input_value) for _ in range(items)]


def _pass_costs(engine):
    tasks = engine.define([task_step("a")])
    polls = engine.define([poll_step()])
    timers = engine.define([{"key": "t", "kind": "TIMER", "duration_seconds": 10}])
    signals = engine.define(
        [{"key": "s", "kind": "SIGNAL", "name": "go", "payload_version": "1", "deadline_seconds": 10}]
    )
    deadline = engine.define([task_step("a")], deadline_seconds=5)
    costs = {}

    costs["continuations (start → activate TASK)"] = _cost(
        lambda n: _started(engine, tasks, n), runner.pass_continuations
    )

    def completed(n):
        for _ in range(n):
            engine.work()

    costs["inbox (TASK SUCCEEDED result)"] = _cost(completed, runner.pass_inbox)
    runner.runner_settle()

    def claimed(n):
        _started(engine, tasks, n)
        runner.runner_settle()
        for _ in range(n):
            engine.claim(lease_seconds=1)
        clock.advance(dt.timedelta(seconds=2))

    costs["lease_expiry (attempt → UNKNOWN)"] = _cost(claimed, runner.pass_lease_expiry)
    runner.runner_settle()

    def polls_due(n):
        _started(engine, polls, n, pending_rounds=5)
        runner.runner_settle()
        for _ in range(n):
            engine.work("polls")
        runner.runner_settle()
        clock.advance(dt.timedelta(seconds=61))

    costs["poll_rounds (open next round)"] = _cost(polls_due, runner.pass_poll_rounds)

    def timers_due(n):
        _started(engine, timers, n)
        runner.runner_settle()
        clock.advance(dt.timedelta(seconds=11))

    costs["timers (fire)"] = _cost(timers_due, runner.pass_timers)
    runner.runner_settle()

    def signals_sent(n):
        instances = _started(engine, signals, n)
        runner.runner_settle()
        for instance in instances:
            signal_accept(
                identity=engine.identity,
                instance_id=instance.id,
                command={"name": "go", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"},
                idempotency_key=f"sig-{instance.id}",
            )

    costs["inbox (signal satisfies wait)"] = _cost(signals_sent, runner.pass_inbox)

    def waits_late(n):
        _started(engine, signals, n)
        runner.runner_settle()
        clock.advance(dt.timedelta(seconds=11))

    costs["wait_deadlines (wait EXPIRED)"] = _cost(waits_late, runner.pass_wait_deadlines)

    def late(n):
        _started(engine, deadline, n)
        runner.runner_settle()
        clock.advance(dt.timedelta(seconds=6))

    costs["instance_deadlines (RUNNING → CANCELLING)"] = _cost(late, runner.pass_instance_deadlines)
    runner.runner_settle()

    def cancelled(n):
        instances = _started(engine, tasks, n)
        runner.runner_settle()
        for instance in instances:
            instance.refresh_from_db()
            instance_cancel(
                identity=engine.identity,
                instance_id=instance.id,
                command={"expected_control_revision": str(instance.control_revision)},
            )

    costs["stop_settlement (cancel queued task, settle)"] = _cost(cancelled, runner.pass_stop_settlement)
    runner.runner_settle()
    _started(engine, tasks, 1)
    runner.runner_settle()
    claims = []
    costs["worker claim (one task)"] = (0, _queries(lambda: claims.append(engine.claim())))
    costs["worker complete (terminal, result event)"] = (
        0,
        _queries(lambda: claim_execute(identity=engine.identity, claim=claims[0])),
    )
    return costs


@pytest.mark.django_db
def test_every_runner_pass_costs_a_fixed_number_of_queries_per_item(engine, capsys):
    engine.application.max_active_tasks = engine.application.max_active_tasks * 10
    engine.application.save()
    costs = _pass_costs(engine)
    with capsys.disabled():
        print(f"\nqueries per runner pass on {connection.vendor}: idle scan + per item")
        for name, (idle, per_item) in costs.items():
            print(f"  {name:48} {idle:3} + {per_item:3}/item")
    assert all(per_item > 0 for _, per_item in costs.values())
