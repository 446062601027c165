"""What one task costs the database on its path, counted exactly: claim → complete → inbox → advance.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_path python -m bench task_path [--instances 50]

One process, one connection, nothing running beside it, so the count has no idle polls and no
races: --instances chains of two ``demo.echo`` TASK steps are started and their first tasks
created (not counted); then each task is claimed, completed, its result consumed by the inbox
pass and the instance advanced by the continuations pass (its next task created, or the instance
finished), one task after another. Statements, round trips and commits are counted at the client
(bench/wire.py) and shown per task, by phase. The floor of bench/engine_floor.py spends 3 commits
a task on the same path (claim, complete, consume-and-advance).
"""

import argparse

from django.db import connection

from bench.database import database_ready
from bench.engine_throughput import QUEUE, cell_prepare
from bench.wire import Wire, wire_count
from core.identity import Identity
from engine import runner
from engine.worker import task_claim, task_complete
from history.models import InstanceState, Namespace, Scope, WorkflowInstance


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=50)
    args = parser.parse_args(argv)
    database_ready()
    runner.runner_settle()
    namespace = Namespace.objects.get(name=cell_prepare(steps=2, instances=args.instances))
    runner.runner_settle()
    worker = Identity(
        namespace_id=namespace.id, actor_id="w" * 32, scopes=frozenset({Scope.TASKS_WORK}), queues=frozenset({QUEUE})
    )
    connection.ensure_connection()
    wire = Wire()
    wire_count(connection.connection, wire)
    phases = {name: Wire() for name in ("claim", "complete", "inbox", "advance")}

    def counted(name, run):
        before = Wire(**vars(wire))
        result = run()
        phases[name] = phases[name] + (wire - before)
        return result

    tasks = 0
    while claim := counted("claim", lambda: task_claim(identity=worker, queue_name=QUEUE, command={"worker": "path"})):
        command = {"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"ok": True}}
        # As a worker completes what it claimed (engine.handlers.claim_execute): with the task its claim read.
        counted(
            "complete",
            lambda c=command, t=claim.task: task_complete(identity=worker, task_id=t.id, command=c, claimed=t),
        )
        counted("inbox", runner.pass_inbox)
        counted("advance", runner.pass_continuations)
        tasks += 1
    finished = WorkflowInstance.objects.filter(namespace=namespace, state=InstanceState.SUCCEEDED).count()
    if finished != args.instances or tasks != 2 * args.instances:
        raise SystemExit(f"{finished} of {args.instances} instances finished after {tasks} tasks")
    print(f"{tasks} tasks, per task:")
    print(f"{'phase':<10} {'statements':>10} {'round trips':>11} {'commits':>8}")
    for name, counts in (*phases.items(), ("total", sum(phases.values(), Wire()))):
        statements, trips, commits = counts.per(tasks)
        print(f"{name:<10} {statements:>10.1f} {trips:>11.1f} {commits:>8.2f}")
