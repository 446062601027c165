"""States that leave ``n`` items due for one runner pass, built through the engine's own services."""

import datetime as dt

from core import clock
from engine import runner
from engine.instances import instance_cancel
from engine.signals import signal_accept
from tests.engine.conftest import task_step
from tests.engine.test_poll import poll_step

TIMER = {"key": "t", "kind": "TIMER", "duration_seconds": 10}
SIGNAL = {"key": "s", "kind": "SIGNAL", "name": "go", "payload_version": "1", "deadline_seconds": 10}
TASKS = [task_step("a")]


def started(engine, n=1, steps=TASKS, input=None, **definition):
    """``n`` new instances of a new definition; their root continuations are pending."""
    made = engine.define(steps, **definition)
    return [engine.start(made, input) for _ in range(n)]


def results_pending(engine, n=1, steps=TASKS, input=None, queue="payments"):
    """``n`` first tasks worked by their handler: their result records are pending in the inbox."""
    instances = started(engine, n, steps, input)
    runner.runner_settle()
    for _ in range(n):
        engine.work(queue)
    return instances


def leases_expired(engine, n=1):
    """``n`` RUNNING attempts whose lease has passed."""
    started(engine, n, TASKS)
    runner.runner_settle()
    for _ in range(n):
        engine.claim(lease_seconds=1)
    clock.advance(dt.timedelta(seconds=2))


def poll_rounds_due(engine, n=1, **poll):
    """``n`` POLL activations answered PENDING whose next round is due."""
    results_pending(engine, n, [poll_step(**poll)], {"pending_rounds": 5}, queue="polls")
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=61))


def timers_due(engine, n=1, **timer):
    """``n`` TIMER waits past their fire time."""
    started(engine, n, [{**TIMER, **timer}])
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=11))


def signals_sent(engine, n=1, steps=(SIGNAL,), **command):
    """``n`` accepted signals (``go`` version 1 unless ``command`` says otherwise), their records pending."""
    instances = started(engine, n, list(steps))
    runner.runner_settle()
    for instance in instances:
        signal_accept(
            identity=engine.identity,
            instance_id=instance.id,
            command={"name": "go", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"}
            | command,
            idempotency_key=f"sig-{instance.id}",
        )
    return instances


def waits_late(engine, n=1):
    """``n`` signal waits past their deadline."""
    started(engine, n, [SIGNAL])
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=11))


def instances_late(engine, n=1):
    """``n`` RUNNING instances past their instance deadline."""
    started(engine, n, TASKS, deadline_seconds=5)
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=6))


def instances_cancelled(engine, n=1):
    """``n`` CANCELLING instances, each with a queued task to cancel."""
    instances = started(engine, n, TASKS)
    runner.runner_settle()
    for instance in instances:
        instance.refresh_from_db()
        instance_cancel(
            identity=engine.identity,
            instance_id=instance.id,
            command={"expected_control_revision": str(instance.control_revision)},
        )
    return instances
