"""Engine throughput beside its floor, in one run: tasks/s, statements, round trips and commits per task, and
the step-to-step latency, by process count.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_throughput python -m bench engine_throughput \
        [--instances 100] [--steps 2] [--cells 1+1,4+1,4+2] [--batch 1] [--rounds 1] [--interval 0.05]

Creates the database if it is missing and migrates it. Each cell (workers + runners) gets a
namespace of its own with one queue and a chain of --steps TASK steps (handler ``demo.echo``),
and --instances instances started through ``instance_start`` before the clock starts. Then
``weave_runner`` and ``weave_worker --batch N`` run as separate processes, forked from this one
(the management commands through ``call_command``, so no process pays Django's start-up inside
the timing); the cell is timed from the fork until every instance is SUCCEEDED. Idle runners
poll every --interval seconds; idle workers back off from 10 ms up to it. Every cell runs
--rounds times; the table shows the fastest round.

Beside each cell, the same cell of ``bench/engine_floor.py`` (raw SQL, the same durability, on
its own database ``weave_bench_floor``), per-item and set-based. Statements, round trips and
commits are counted at the client in every runner and worker process (bench/wire.py), idle polls
included, and divided by the tasks run. Step-to-step latency: from a task's attempt finishing
to the next task of its instance being created (claimable), over every pair of the cell.

The runners run every instance of the database, so it must hold only engine-made ones: run it
on a database of its own. The quota of each cell's application and queue is raised so that
permits never throttle the measurement. Ends with ``manage.py weave_check`` over the whole
database. Prints the server's buffer pool size; changes no server setting.
"""

import argparse
import multiprocessing
import os
import sys
import time

from django.core.management import call_command
from django.db import connection
from django.db.backends.signals import connection_created

from bench.database import database_ready
from bench.engine_floor import Run, floor_prepare, floor_run
from bench.wire import HEADER, Wire, wire_collect, wire_count
from core.identity import Identity
from core.ids import new_id
from engine.definitions import definition_create
from engine.instances import instance_start
from engine.runner import runner_settle
from history.models import Attempt, InstanceState, Scope, Task, WorkflowInstance
from history.tenancy import namespace_ensure

QUEUE = "throughput"
FAILED_STATES = (InstanceState.NEEDS_REVIEW, InstanceState.FAILED, InstanceState.CANCELLED)


def cell_prepare(*, steps: int, instances: int) -> str:
    """A namespace with a chain of ``steps`` demo.echo TASK steps and ``instances`` started instances."""
    namespace, application, queues = namespace_ensure(
        name=f"throughput-{new_id()[:8]}", application="throughput", queues=[QUEUE]
    )
    for row in (application, *queues):
        row.max_active_tasks = 10**6
        row.save(update_fields=["max_active_tasks"])
    keys = [f"step-{n}" for n in range(1, steps + 1)]
    definition_create(
        namespace_id=namespace.id,
        document={
            "name": "echo-chain",
            "application": application.name,
            "steps": [
                {"key": key, "kind": "TASK", "after": keys[:n][-1:], "handler": "demo.echo", "queue": QUEUE}
                for n, key in enumerate(keys)
            ],
        },
    )
    identity = Identity(
        namespace_id=namespace.id, actor_id="c" * 32, scopes=frozenset({Scope.WRITE}), queues=frozenset({QUEUE})
    )
    for number in range(instances):
        instance_start(
            identity=identity,
            command={"definition": "echo-chain", "input": {"n": number}},
            idempotency_key=f"throughput-{number}",
        )
    return namespace.name


def command_process(results, name: str, node: int, **options) -> multiprocessing.Process:
    """``manage.py <name>`` in a forked process, its wire counted; it stops on SIGTERM like the real one. On a
    cluster URL its connections go to node ``node`` first (the processes spread their writes)."""

    def run() -> None:
        os.environ["WEAVE_DATABASE_NODE"] = str(node)
        wire = Wire()
        connection_created.connect(lambda connection, **_: wire_count(connection.connection, wire), weak=False)
        with open(os.devnull, "w") as quiet:
            call_command(name, stdout=quiet, **options)
        results.put(wire)

    return multiprocessing.get_context("fork").Process(target=run, daemon=True)


def _latencies(namespace: str) -> list[float]:
    """Milliseconds from each task's attempt finishing to the creation of its instance's next task."""
    finished = dict(Attempt.objects.filter(task__namespace__name=namespace).values_list("task_id", "finished_at"))
    chains: dict[str, list[tuple]] = {}
    for task_id, instance_id, created_at in (
        Task.objects.filter(namespace__name=namespace)
        .order_by("created_at")
        .values_list("id", "source_instance_id", "created_at")
    ):
        chains.setdefault(instance_id, []).append((task_id, created_at))
    return [
        (after[1] - finished[before[0]]).total_seconds() * 1000
        for chain in chains.values()
        for before, after in zip(chain, chain[1:], strict=False)
        if finished.get(before[0])
    ]


def cell_run(*, namespace: str, workers: int, runners: int, batch: int, interval: float, timeout: float) -> Run:
    """Run the cell's instances to SUCCEEDED with ``workers`` + ``runners`` processes."""
    mine = WorkflowInstance.objects.filter(namespace__name=namespace)
    total = mine.count()
    results = multiprocessing.get_context("fork").Queue()
    processes = [command_process(results, "weave_runner", n, interval=interval) for n in range(runners)] + [
        command_process(
            results, "weave_worker", runners + n, queue=QUEUE, namespace=namespace, interval=interval, batch=batch
        )
        for n in range(workers)
    ]
    connection.close()  # the children open their own connections
    started = time.perf_counter()
    for process in processes:
        process.start()
    try:
        while mine.filter(state=InstanceState.SUCCEEDED).count() < total:
            stuck = mine.filter(state__in=FAILED_STATES).count()
            dead = [p for p in processes if not p.is_alive()]
            if stuck or dead or time.perf_counter() - started > timeout:
                raise SystemExit(f"{namespace}: {stuck} instance(s) failed, {len(dead)} process(es) died, or timeout")
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
    wire = wire_collect(results, processes)
    tasks = Task.objects.filter(namespace__name=namespace).count()
    return Run(seconds=seconds, tasks=tasks, wire=wire, latencies_ms=_latencies(namespace))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100, help="instances per cell")
    parser.add_argument("--steps", type=int, default=2, help="TASK steps per instance")
    parser.add_argument("--cells", default="1+1,4+1,4+2", help="workers+runners, comma-separated")
    parser.add_argument("--batch", type=int, default=1, help="tasks a worker claims per transaction (both engines)")
    parser.add_argument("--interval", type=float, default=0.05, help="idle poll seconds of runners and workers")
    parser.add_argument("--rounds", type=int, default=1, help="times each cell runs; the fastest counts")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a cell may take")
    args = parser.parse_args(argv)
    database_ready()
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit, VERSION()")
        pool, flush, version = cursor.fetchone()
    print(f"MariaDB {version}, innodb_buffer_pool_size {pool / 2**20:.0f} MiB, flush_log_at_trx_commit {flush}")
    # Whatever an earlier run left due is settled first, so each cell times only its own instances.
    try:
        runner_settle()
    except Exception as exc:  # any failure here means the runners of the cells would fail the same way
        raise SystemExit(
            f"the runner cannot run this database's instances ({exc!r}): use a database of its own"
        ) from exc
    rows = []
    for cell in args.cells.split(","):
        workers, runners = (int(n) for n in cell.split("+"))
        best: dict[str, Run] = {}
        # Rounds alternate the engines, so a burst of load from elsewhere hits one round of each.
        for round_number in range(1, args.rounds + 1):
            namespace = cell_prepare(steps=args.steps, instances=args.instances)
            runs = {
                "weave": cell_run(
                    namespace=namespace,
                    workers=workers,
                    runners=runners,
                    batch=args.batch,
                    interval=args.interval,
                    timeout=args.timeout,
                )
            }
            for variant, set_based in (("floor per-item", False), ("floor set-based", True)):
                floor_prepare(instances=args.instances, steps=args.steps)
                runs[variant] = floor_run(workers=workers, runners=runners, set_based=set_based, batch=args.batch)
            for engine, run in runs.items():
                if engine not in best or run.seconds < best[engine].seconds:
                    best[engine] = run
                print(f"round {round_number}: {cell} {engine}: {run.seconds:.2f} s", file=sys.stderr)
        rows += [f"{engine:<18} {cell:>5} {run.row()}" for engine, run in best.items()]
        ratio = (best["weave"].tasks / best["weave"].seconds) / (
            best["floor per-item"].tasks / best["floor per-item"].seconds
        )
        rows.append(f"{'':<18} {cell:>5} weave / floor per-item: {ratio:.2f}x")
    print(f"claim batch {args.batch}, {args.instances} instances x {args.steps} steps per cell; per task:")
    print(f"{'engine':<18} {'cell':>5} {HEADER}")
    for row in rows:
        print(row)
    call_command("weave_check")
