"""Each runner pass costs a fixed number of queries per item, whatever the history size.

The measured numbers are the ones docs/performance.md reports (``pytest -s`` prints them).
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import NotFound
from engine import quota, runner
from engine.handlers import claim_execute
from history.models import Queue
from testkit import states


def _queries(run) -> int:
    with CaptureQueriesContext(connection) as captured:
        run()
    return len(captured)


def _cost(prepare, run_pass) -> tuple[int, int]:
    """(idle pass, per item) for a pass, checked to be linear in the number of items.

    Each ``prepare`` defines a new definition, which a process reads once (``engine.definitions.definition_of``):
    beside the fixed cost per item, a pass may read it once, whatever the number of its items. The application's
    and the queues' names and ids, also read once per process (``engine.quota``), are read before
    (``_pass_costs``), as by a process that has run a while.
    """
    idle = _queries(run_pass)
    counts = []
    for items in (1, 3):
        prepare(items)
        counts.append(_queries(run_pass) - idle)
    one, three = counts
    per_item, odd = divmod(three - one, 2)
    assert odd == 0 and one - per_item in (0, 1), f"per-item cost is not constant: 1 item {one}, 3 items {three}"
    return idle, per_item


def _pass_costs(engine):
    for queue in engine.queues.values():
        quota.queue_named(queue.id)
        quota.queue_id_named((queue.namespace_id, queue.name))
    quota._application_id((engine.application.namespace_id, engine.application.name))
    costs = {}
    passes = {
        "continuations (start → activate TASK)": (states.started, runner.pass_continuations),
        "inbox (TASK SUCCEEDED result)": (states.results_pending, runner.pass_inbox),
        "lease_expiry (attempt → UNKNOWN)": (states.leases_expired, runner.pass_lease_expiry),
        "poll_rounds (open next round)": (states.poll_rounds_due, runner.pass_poll_rounds),
        "timers (fire)": (states.timers_due, runner.pass_timers),
        "inbox (signal satisfies wait)": (states.signals_sent, runner.pass_inbox),
        "wait_deadlines (wait EXPIRED)": (states.waits_late, runner.pass_wait_deadlines),
        "instance_deadlines (RUNNING → CANCELLING)": (states.instances_late, runner.pass_instance_deadlines),
        "stop_settlement (cancel queued task, settle)": (states.instances_cancelled, runner.pass_stop_settlement),
    }
    for name, (prepare, run_pass) in passes.items():
        costs[name] = _cost(lambda n, prepare=prepare: prepare(engine, n), run_pass)
        runner.runner_settle()
    states.started(engine, 1, states.TASKS)
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


@pytest.mark.django_db
def test_an_idle_claim_is_one_statement_and_a_missing_queue_is_looked_for_every_time(engine):
    assert engine.claim() is None  # the queue is read once, as the first empty claim of a process does
    assert _queries(lambda: engine.claim()) == 1
    for _ in range(2):
        with pytest.raises(NotFound, match="queue later not found"), CaptureQueriesContext(connection) as captured:
            engine.claim("later")
        assert len(captured) == 2  # the candidates, then the queue by its name
    Queue.objects.create(namespace=engine.namespace, name="later", max_active_tasks=5)
    assert engine.claim("later") is None  # created since: found
