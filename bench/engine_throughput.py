"""Engine throughput: tasks per second through claim → complete → inbox → advance, by process count.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_ops python bench/engine_throughput.py \
        [--instances 60] [--steps 2] [--workers 1,2,4] [--runners 1,2] [--rounds 2]

Creates the database if it is missing and migrates it. Each cell (workers × runners) gets a
namespace of its own with one queue and a definition of --steps TASK steps in a chain (handler
``demo.echo``), and --instances instances started through ``instance_start`` before the clock
starts. Then ``weave_runner`` and ``weave_worker`` (``--concurrency 1``) run as separate
processes, forked from this one (the management commands through ``call_command``, so no
process pays Django's start-up inside the timing), and the cell is timed from the fork until
every instance is SUCCEEDED. Both commands poll every --interval seconds when idle (defaults
are 1 and 0.5 s; a shorter one keeps the tail of a small run from being idle time). Every cell
runs --rounds times, in whole rounds over the grid; the table shows the fastest (the least
disturbed on a shared machine) and each round's seconds.

The runners run every instance of the database, so it must hold only engine-made ones: the
synthetic NEEDS_REVIEW states of bench/recovery_ops.py are not (their definitions skip
validation); run this first or on a database of its own. The quota of each cell's application
and queue is raised so that permits never throttle the measurement. Ends with
``manage.py weave_check`` over the whole database.
"""

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "weave_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.database import database_ready  # noqa: E402
from core.identity import Identity  # noqa: E402
from core.ids import new_id  # noqa: E402
from engine.definitions import definition_create  # noqa: E402
from engine.instances import instance_start  # noqa: E402
from engine.runner import runner_settle  # noqa: E402
from history.models import InstanceState, Scope, WorkflowInstance  # noqa: E402
from history.tenancy import namespace_ensure  # noqa: E402

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


def command_process(name: str, **options) -> multiprocessing.Process:
    """``manage.py <name>`` in a forked process; it stops on SIGTERM like the real one."""

    def run() -> None:
        with open(os.devnull, "w") as quiet:
            call_command(name, stdout=quiet, **options)

    return multiprocessing.get_context("fork").Process(target=run, daemon=True)


def cell_run(*, namespace: str, workers: int, runners: int, interval: float, timeout: float) -> float:
    """Seconds from starting the processes until every instance of ``namespace`` is SUCCEEDED."""
    mine = WorkflowInstance.objects.filter(namespace__name=namespace)
    total = mine.count()
    processes = [command_process("weave_runner", interval=interval) for _ in range(runners)] + [
        command_process("weave_worker", queue=QUEUE, namespace=namespace, interval=interval) for _ in range(workers)
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
            time.sleep(0.05)
        return time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=60, help="instances per cell")
    parser.add_argument("--steps", type=int, default=2, choices=(1, 2), help="TASK steps per instance")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (comma-separated)")
    parser.add_argument("--runners", default="1,2", help="runner process counts (comma-separated)")
    parser.add_argument("--interval", type=float, default=0.1, help="idle poll seconds of runners and workers")
    parser.add_argument("--rounds", type=int, default=2, help="times each cell runs; the fastest counts")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a cell may take")
    args = parser.parse_args()
    database_ready()
    # Whatever an earlier run left due is settled first, so each cell times only its own instances.
    try:
        runner_settle()
    except Exception as exc:  # any failure here means the runners of the cells would fail the same way
        raise SystemExit(
            f"the runner cannot run this database's instances ({exc!r}): use a database of its own"
        ) from exc
    cells = [(int(w), int(r)) for r in args.runners.split(",") for w in args.workers.split(",")]
    timings: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    # Whole rounds over every cell, so a burst of load from elsewhere hits one round of each, not one cell.
    for round_number in range(1, args.rounds + 1):
        for workers, runners in cells:
            namespace = cell_prepare(steps=args.steps, instances=args.instances)
            seconds = cell_run(
                namespace=namespace, workers=workers, runners=runners, interval=args.interval, timeout=args.timeout
            )
            timings[workers, runners].append(seconds)
            print(f"round {round_number}: {workers} workers, {runners} runners: {seconds:.2f} s", file=sys.stderr)
    tasks = args.instances * args.steps
    print(f"{'workers':>7} {'runners':>7} {'tasks':>6} {'seconds':>8} {'tasks/s':>8}  each round (s)")
    for (workers, runners), seconds in timings.items():
        rounds = " ".join(f"{s:.2f}" for s in seconds)
        print(f"{workers:>7} {runners:>7} {tasks:>6} {min(seconds):>8.2f} {tasks / min(seconds):>8.1f}  {rounds}")
    call_command("weave_check")


if __name__ == "__main__":
    main()
