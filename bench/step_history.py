"""Recovery checks and the admin instance page on a step with 100 000 activations beside one with 1.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_steps python -m bench step_history \
        [--size 100000] [--reps 30]

Recreates its own database (the name must start with weave_bench_) and builds two TASK steps the way
the recovery tests build a long retry chain (bulk inserts: each activation's task FAILED after one
attempt, retrying its predecessor within the budget), the short one with one activation, then fills
the step counters as the migration does. Before timing it runs weave_check's step counter rule and
the recovery verification (a RetryStep preview that must be offered). Timed side by side, interleaved:

- retry check: RetryStep's preview, every check the operation runs (history, chain, budget, quota);
- eligibility: every operation's checks for the instance, as the instance page asks for them;
- budget read: the step and its current task loaded and ``task_step_budget`` read from them;
- instance page: the admin instance page through the test client, a logged-in superuser operator.

Prints p50/p95 in milliseconds, the queries per call, long/short on p50 beside the 1.2 target, and the
server's buffer pool size.
"""

import argparse
import statistics
import time

import MySQLdb
from django.conf import settings
from django.core.signals import request_started
from django.db import connection, reset_queries
from django.test.utils import CaptureQueriesContext

from bench.database import buffer_pool_mib, database_ready
from bench.serving import admin_client, percentile
from engine.budget import task_step_budget
from engine.check import invariants_check
from history.credentials import credential_issue, identity_of_credential
from history.models import Activation, Scope, Step, Task
from history.tenancy import namespace_ensure
from recovery.eligibility import instance_eligibility, operation_preview
from testkit import requests as rq
from testkit.histories import retry_chain_state

TARGET = 1.2


def database_fresh() -> None:
    """Drop and recreate this bench's own database, then migrate it."""
    db = settings.DATABASES["default"]
    if connection.vendor != "mysql" or not db["NAME"].startswith("weave_bench_"):
        raise SystemExit("set WEAVE_DATABASE_URL=mysql://.../weave_bench_<name>: this bench drops its database")
    server = MySQLdb.connect(
        host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306), user=db["USER"], password=db["PASSWORD"] or ""
    )
    server.cursor().execute(f"DROP DATABASE IF EXISTS `{db['NAME']}`")
    server.close()
    connection.close()
    database_ready()


def counters_fill(state) -> None:
    """The counters of a bulk-built chain: one activation per task, each task one attempt."""
    step = state.steps["charge"]
    n = Activation.objects.filter(step_id=step.id).count()
    Step.objects.filter(pk=step.id).update(activation_count=n, attempts_before=max(n - 1, 0))


def timed(call, reps: int) -> tuple[list[float], int]:
    reset_queries()  # the log keeps a bounded number of queries: a full one would count none
    with CaptureQueriesContext(connection) as queries:
        call()
    values = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        values.append((time.perf_counter() - started) * 1000)
    return values, len(queries)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    database_fresh()
    tenancy = namespace_ensure(name="bench-steps", application="billing", queues=["payments"])
    identity = identity_of_credential(
        credential_issue(
            namespace_id=tenancy[0].id,
            application_id=tenancy[1].id,
            actor_id="a" * 32,
            label="bench",
            scopes=[Scope.RECOVER, Scope.READ],
            queue_access="*",
        ).credential
    )
    started = time.monotonic()
    built = {"short": retry_chain_state(tenancy, 1), "long": retry_chain_state(tenancy, args.size)}
    for state in built.values():
        counters_fill(state)
    print(f"built 1 and {args.size} activations in {time.monotonic() - started:.0f} s")
    drift = [v for v in invariants_check() if v.code == "step_counter_drift"]
    print(f"weave_check step_counter_drift: {len(drift)} violations")
    # A request empties the query log when it starts: keep it, so the page's queries are counted too.
    request_started.disconnect(reset_queries)
    client = admin_client(tenancy[0])

    def retry_check(state):
        return lambda: operation_preview(
            identity=identity, operation="retry-step", instance_id=state.instance.id, command=rq.retry(state)
        )

    def budget_read(state):
        def read():
            step = Step.objects.get(pk=state.steps["charge"].id)
            task = Task.objects.get(source_activation_id=step.current_activation_id)
            return task_step_budget(step=step, spec=state.definition.step_spec("charge"), task=task)

        return read

    calls = {
        "retry check": retry_check,
        "eligibility": lambda s: lambda: instance_eligibility(identity=identity, instance_id=s.instance.id),
        "budget read": budget_read,
        "instance page": lambda s: lambda: client.get(f"/admin/history/workflowinstance/{s.instance.id}/change/"),
    }
    for label, state in built.items():
        preview = calls["retry check"](state)()  # refusals raise
        assert preview["attempt_budget"]["used"] == len(state.tasks), (label, preview)
        assert calls["instance page"](state)().status_code == 200
    pool = buffer_pool_mib()
    print(f"innodb_buffer_pool_size {pool} MiB; long = {args.size} activations, short = 1")
    print(f"{'call':<14} {'history':<6} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8}")
    for name, make in calls.items():
        timings, counts = {}, {}
        for label, state in built.items():
            timings[label], counts[label] = timed(make(state), args.reps)
            values = timings[label]
            p50, p95 = statistics.median(values), percentile(values, 0.95)
            print(f"{name:<14} {label:<6} {counts[label]:>7} {p50:>8.2f} {p95:>8.2f}")
        ratio = statistics.median(timings["long"]) / statistics.median(timings["short"])
        print(f"{name:<14} long/short {ratio:.2f} (target <= {TARGET})")
