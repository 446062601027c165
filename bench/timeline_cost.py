"""What the instance timeline costs one task end to end: statements and time, with and without it.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_timeline python -m bench timeline_cost \
        [--tasks 200] [--rounds 3]

One process, one connection, nothing else running against the database it creates (and names)
itself. Each task is one instance of a one-TASK ``demo.echo`` definition taken through every
transaction of its life in order: start, the runner's advance (task created), claim, complete,
the runner's inbox pass and advance (instance SUCCEEDED). Every statement is counted with an
execute wrapper. The same loop runs with the timeline followed and with its writer disconnected
("before": the engine as it was without events), alternating in rounds so load from elsewhere
hits both; the table shows each side's fastest round, statements per task, and after / before.
The "before" side's instances have no timeline, so the database is the bench's alone.
"""

import argparse
import sys
import time

from django.db import connection
from django.db.models.signals import post_save

from bench.database import database_ready
from core.identity import Identity
from core.ids import new_id
from engine.definitions import definition_create
from engine.instances import instance_start
from engine.runner import runner_settle
from engine.worker import task_claim, task_complete
from history import events
from history.models import InstanceEvent, InstanceState, Scope, WorkflowInstance
from history.tenancy import namespace_ensure

QUEUE = "timeline"


class StatementCount:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def tenant() -> tuple[Identity, Identity]:
    """A namespace with the one-step definition; the client's and the worker's identities."""
    namespace, application, queues = namespace_ensure(
        name=f"timeline-{new_id()[:8]}", application="timeline", queues=[QUEUE]
    )
    for row in (application, *queues):
        row.max_active_tasks = 10**6
        row.save(update_fields=["max_active_tasks"])
    definition_create(
        namespace_id=namespace.id,
        document={
            "name": "echo",
            "application": application.name,
            "steps": [{"key": "echo", "kind": "TASK", "after": [], "handler": "demo.echo", "queue": QUEUE}],
        },
    )
    queues = frozenset({QUEUE})
    client = Identity(namespace_id=namespace.id, actor_id="c" * 32, scopes=frozenset({Scope.WRITE}), queues=queues)
    worker = Identity(namespace_id=namespace.id, actor_id="w" * 32, scopes=frozenset({Scope.TASKS_WORK}), queues=queues)
    return client, worker


def task_life(client: Identity, worker: Identity, number: int) -> str:
    receipt = instance_start(
        identity=client, command={"definition": "echo", "input": {"n": number}}, idempotency_key=f"t-{new_id()}"
    )
    runner_settle()
    claim = task_claim(identity=worker, queue_name=QUEUE, command={"worker": "bench"})
    task_complete(
        identity=worker,
        task_id=claim.task.id,
        command={"attempt_id": claim.attempt.id, "outcome": "SUCCEEDED", "result": {"n": number}},
    )
    runner_settle()
    return receipt.data["id"]


def side_run(*, followed: bool, tasks: int) -> tuple[float, float, int]:
    """(seconds, statements per task, events written) for ``tasks`` task lives."""
    uids = {model: f"weave.events.{model.__name__}" for model in events.SUBJECT_TYPES}
    if not followed:
        for model, uid in uids.items():
            post_save.disconnect(sender=model, dispatch_uid=uid)
    try:
        client, worker = tenant()
        events_before = InstanceEvent.objects.count()
        counter = StatementCount()
        ids = []
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            for number in range(tasks):
                ids.append(task_life(client, worker, number))
            seconds = time.perf_counter() - started
    finally:
        events.events_follow()
    done = WorkflowInstance.objects.filter(pk__in=ids, state=InstanceState.SUCCEEDED).count()
    if done != tasks:
        raise SystemExit(f"only {done} of {tasks} instances SUCCEEDED")
    return seconds, counter.count / tasks, InstanceEvent.objects.count() - events_before


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="task lives per side per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each side's fastest counts")
    args = parser.parse_args(argv)
    database_ready()
    runner_settle()
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for round_number in range(1, args.rounds + 1):
        for followed in (False, True):
            results[followed].append(side_run(followed=followed, tasks=args.tasks))
            seconds = results[followed][-1][0]
            print(f"round {round_number}: timeline {'on' if followed else 'off'}: {seconds:.2f} s", file=sys.stderr)
    before, after = (min(results[side]) for side in (False, True))
    print(f"{'side':<18} {'ms/task':>8} {'statements/task':>16} {'events/task':>12}")
    for name, (seconds, statements, written) in (("before (no events)", before), ("after (timeline)", after)):
        print(f"{name:<18} {1000 * seconds / args.tasks:>8.2f} {statements:>16.1f} {written / args.tasks:>12.1f}")
    print(f"after / before: time {after[0] / before[0]:.2f}x, statements {after[1] / before[1]:.2f}x")
