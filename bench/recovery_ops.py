"""Recovery operations under concurrent clients, ours vs the floor of their own row locks and writes.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench_ops python -m bench recovery_ops \
        [--instances 24] [--clients 1,4,8] [--ops review-task,resolve-step,...]

Creates the database if it is missing and migrates it. For each operation and client count it
builds --instances distinct instances in the state the operation succeeds on (the builders of
testkit/states.py, the states the recovery tests prove the operations on) for ours and as
many for the floor, all before the timed part. The clients are processes (forked once the
states are built) with one database connection each (one credential each, as separate API
clients), released together; each runs its share of the instances one after another.

- ours: the operation's service (``recovery.operations.OPERATIONS[name].service``), as the API calls it.
- floor: the same row locks and writes and nothing else. Each floor instance's statements are
  captured by running the service once on it inside a transaction that is rolled back
  (``CaptureQueriesContext``), keeping only the locking reads (``SELECT ... FOR UPDATE``, in
  their order) and the writes (``INSERT``/``UPDATE``/``DELETE``). The timed floor replays them as
  raw SQL in one transaction on that instance: the same locks in the same order, the same rows
  and columns written. What ours pays on top is everything else: parsing, the plain reads and
  checks, idempotency, audits built in Python, the receipt.

The floor writes the captured absolute quota counters; they are recounted after each floor run
(untimed) so the database stays consistent for ``manage.py weave_check``.

Prints p50/p95 latency per operation (ms), operations per second (operations / the cell's wall
time), ours/floor on p50 and the statements per operation (ours: all, captured; floor: the
kept ones); the target is ours/floor <= 3 for every operation.
"""

import argparse
import contextlib
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, reset_queries, transaction
from django.test.utils import CaptureQueriesContext

from bench.database import database_ready
from bench.serving import percentile
from core.db.base import pin_node
from core.identity import Identity
from core.ids import new_id
from history.credentials import credential_issue, identity_of_credential
from history.locking import atomic_with_retry
from history.models import Scope
from history.tenancy import namespace_ensure
from recovery.operations import OPERATIONS as RECOVERY_OPERATIONS
from testkit import requests as rq
from testkit import states

TARGET = 3.0
# Each operation: its display name, the command builder and the state it succeeds on.
OPERATIONS = {
    "review-task": ("ReviewTask", rq.review, states.task_unknown_state),
    "resolve-step": ("ResolveStep", rq.resolve, states.task_reviewed_state),
    "continue-poll": ("ContinuePoll", rq.continue_poll, states.poll_pending_reviewed_state),
    "rearm-wait": ("RearmWait", rq.rearm, states.signal_contract_violation_state),
    "continue": ("Continue", rq.continue_, states.task_resolved_state),
    "retry-step": ("RetryStep", rq.retry, states.task_failed_state),
}
WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class Job:
    """One prepared operation: ours runs ``service``; the floor replays ``statements``."""

    identity: Identity
    state: states.State
    command: dict
    key: str
    statements: list[str] | None = None
    queries: int = 0  # every statement the service issued, of which ``statements`` are kept


def floor_capture(service, job: Job) -> None:
    """The locking reads and the writes the service issues on this instance, captured and rolled back."""
    reset_queries()  # the capture reads a bounded log: start each one empty
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        rq.run(service, job.identity, job.state, job.command, key=job.key)
        transaction.set_rollback(True)
    kept, issued = [], 0
    for query in queries.captured_queries:
        sql = query["sql"]
        verb = sql.lstrip()[:6].upper()
        if "times: " in sql[:20]:
            raise SystemExit(f"an executemany the floor cannot replay: {sql[:80]}")
        if verb in WRITES or (verb == "SELECT" and "FOR UPDATE" in sql.upper()):
            kept.append(sql)
        # Counted like the floor's: statements on rows, not transaction control (BEGIN, savepoints).
        issued += verb == "SELECT" or verb in WRITES
    if not kept:
        raise SystemExit(f"{job.key}: no statements captured")
    job.statements, job.queries = kept, issued


def run_ours(service, job: Job) -> None:
    receipt = rq.run(service, job.identity, job.state, job.command, key=job.key)
    if receipt.replayed:
        raise RuntimeError(f"{job.key}: replayed instead of committed")


def run_floor(service, job: Job) -> None:
    def replay() -> None:
        with connection.cursor() as cursor:
            for sql in job.statements:
                cursor.execute(sql)
                if sql.lstrip()[:6].upper() == "SELECT":
                    cursor.fetchall()

    # The same bounded retry as ours: on a cluster a collision shows at commit, and the floor meets it too.
    atomic_with_retry(replay)


def timed(run: Callable, service, shares: list[list[Job]]) -> tuple[list[float], float]:
    """Each client is a process of its own (forked: it has the jobs already), with its own connection, released
    together with the others; latencies (ms) and the wall time (s)."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(shares) + 1)
    results = context.Queue()

    def client(number: int, share: list[Job]) -> None:
        mine = []
        try:
            with pin_node(number):  # on a cluster URL, the clients start at the nodes in turn
                connection.ensure_connection()
            barrier.wait()
            for job in share:
                started = time.perf_counter()
                run(service, job)
                mine.append((time.perf_counter() - started) * 1000)
            results.put((mine, None))
        except BaseException as exc:  # reported by the parent
            results.put((mine, repr(exc)))
            barrier.abort()
        finally:
            connection.close()

    connection.close()  # the clients open their own connections
    processes = [context.Process(target=client, args=pair, daemon=True) for pair in enumerate(shares)]
    for process in processes:
        process.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed before the start: read below
        barrier.wait()
    started = time.perf_counter()
    answers = [results.get() for _ in processes]
    wall = time.perf_counter() - started
    for process in processes:
        process.join()
    errors = [error for _, error in answers if error]
    if errors:
        raise SystemExit(f"{run.__name__}: {errors[0]}")
    return [latency for mine, _ in answers for latency in mine], wall


class Bench:
    def __init__(self, clients_max: int) -> None:
        suffix = new_id()[:8]
        self.tenancy = namespace_ensure(name=f"bench-ops-{suffix}", application="billing", queues=[states.QUEUE])
        namespace, application, queues = self.tenancy
        # Hundreds of built states hold permits; the default quota of 100 would refuse RetryStep.
        for row in (application, *queues):
            row.max_active_tasks = 10**6
            row.save(update_fields=["max_active_tasks"])
        self.identities = [
            identity_of_credential(
                credential_issue(
                    namespace_id=namespace.id,
                    application_id=application.id,
                    actor_id=f"{number + 1:032x}",
                    label=f"bench client {number}",
                    scopes=[Scope.RECOVER, Scope.READ],
                    queue_access="*",
                ).credential
            )
            for number in range(clients_max)
        ]

    def shares(self, name: str, clients: int, instances: int, *, floor: bool) -> list[list[Job]]:
        _, build, make = OPERATIONS[name]
        shares: list[list[Job]] = [[] for _ in range(clients)]
        for number in range(instances):
            state = make(self.tenancy)
            job = Job(self.identities[number % clients], state, build(state), f"bench-{new_id()}")
            if floor:
                floor_capture(RECOVERY_OPERATIONS[name].service, job)
            shares[number % clients].append(job)
        return shares


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=24, help="instances per cell and variant")
    parser.add_argument("--clients", default="1,4,8", help="client counts (comma-separated)")
    parser.add_argument("--ops", default=",".join(OPERATIONS), help="operations (comma-separated)")
    args = parser.parse_args(argv)
    clients_list = [int(c) for c in args.clients.split(",")]
    names = args.ops.split(",")
    unknown = set(names) - set(OPERATIONS)
    if unknown:
        parser.error(f"--ops: unknown {sorted(unknown)}; choose from {','.join(OPERATIONS)}")
    database_ready()
    bench = Bench(max(clients_list))
    started = time.monotonic()
    header = (
        f"{'op':<13} {'clients':>7} {'ours p50/p95 ms':>16} {'ours ops/s':>10} "
        f"{'floor p50/p95 ms':>17} {'floor ops/s':>11} {'ours/floor':>10} {'SQL ours/floor':>14}"
    )
    print(header)
    worst: dict[str, float] = {}
    for name in names:
        service = RECOVERY_OPERATIONS[name].service
        for cell, clients in enumerate(clients_list):
            ours_shares = bench.shares(name, clients, args.instances, floor=False)
            floor_shares = bench.shares(name, clients, args.instances, floor=True)
            # Alternate which variant runs first, so drift on a noisy machine favours neither.
            variants = [(run_ours, ours_shares), (run_floor, floor_shares)]
            if cell % 2:
                variants.reverse()
            results = {run.__name__: timed(run, service, shares) for run, shares in variants}
            states.quota_sync(floor_shares[0][0].state)
            (ours, ours_wall), (floor, floor_wall) = results["run_ours"], results["run_floor"]
            ratio = statistics.median(ours) / statistics.median(floor)
            worst[name] = max(worst.get(name, 0.0), ratio)
            print(
                f"{OPERATIONS[name][0]:<13} {clients:>7} "
                f"{statistics.median(ours):>7.1f} / {percentile(ours, 0.95):>6.1f} {len(ours) / ours_wall:>10.1f} "
                f"{statistics.median(floor):>8.1f} / {percentile(floor, 0.95):>6.1f} {len(floor) / floor_wall:>11.1f} "
                f"{ratio:>10.2f} {floor_shares[0][0].queries:>8} / {len(floor_shares[0][0].statements):>3}",
                flush=True,
            )
    print()
    for name, ratio in worst.items():
        verdict = "met" if ratio <= TARGET else "MISSED"
        print(f"{OPERATIONS[name][0]:<13} worst ours/floor {ratio:.2f}: target <= {TARGET:.0f}x {verdict}")
    print(f"instances per cell and variant: {args.instances}; total {time.monotonic() - started:.0f} s")
