"""The floor under the engine: the same task chain in raw SQL, with the same durability, nothing else.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench engine_floor \
        [--instances 200] [--steps 2] [--cells 1+1,4+1,4+2] [--batch 1]

Runs on a database of its own, ``weave_bench_floor`` (created, its tables re-created), on the
server WEAVE_DATABASE_URL names. Each instance is a chain of --steps tasks. What every task
gets, as in the engine: an attempt row created at its claim and finished at its completion, a
RESULT event (per-task sequence, unique) and an inbox record written with the completion, the
inbox record consumed under the instance's row lock, the instance's and the task's revisions
bumped by each change, and the next task created in that same transaction. Claims and inbox
reads use ``FOR UPDATE SKIP LOCKED``; locks are taken inbox → instance → task, each level in key
order. Every transaction commits on its own (``innodb_flush_log_at_trx_commit`` as the server has
it). What it leaves out: quota, gates, the timeline, idempotency, validation.

Two runner variants: ``per-item`` (one inbox record per transaction) and ``set-based`` (up to 100
records per transaction, multi-row statements). Workers claim --batch tasks per transaction.
Statements, round trips and commits are counted at the client (bench/wire.py) in every process.
"""

import argparse
import datetime as dt
import multiprocessing
import statistics
import time
import uuid
from dataclasses import dataclass

import MySQLdb
from django.conf import settings

from bench.wire import HEADER, Wire, wire_collect, wire_count

DATABASE = "weave_bench_floor"
SET_SIZE = 100
IDLE_FIRST, IDLE_MOST = 0.001, 0.05

SCHEMA = (
    """CREATE TABLE instance (id CHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL, step INT NOT NULL,
        steps INT NOT NULL, revision INT NOT NULL, updated_at DATETIME(6) NOT NULL)""",
    """CREATE TABLE task (id CHAR(32) PRIMARY KEY, instance_id CHAR(32) NOT NULL, step INT NOT NULL,
        state VARCHAR(16) NOT NULL, priority INT NOT NULL, revision INT NOT NULL, attempt_count INT NOT NULL,
        result TEXT, created_at DATETIME(6) NOT NULL, updated_at DATETIME(6) NOT NULL,
        KEY task_claim (state, priority, created_at), KEY task_instance (instance_id, step))""",
    """CREATE TABLE attempt (id CHAR(32) PRIMARY KEY, task_id CHAR(32) NOT NULL, number INT NOT NULL,
        state VARCHAR(16) NOT NULL, worker VARCHAR(64) NOT NULL, lease_expires_at DATETIME(6) NOT NULL,
        started_at DATETIME(6) NOT NULL, finished_at DATETIME(6), result TEXT, UNIQUE KEY (task_id, number))""",
    """CREATE TABLE result_event (id CHAR(32) PRIMARY KEY, task_id CHAR(32) NOT NULL, seq INT NOT NULL,
        kind VARCHAR(16) NOT NULL, outcome VARCHAR(16) NOT NULL, result TEXT, created_at DATETIME(6) NOT NULL,
        UNIQUE KEY (task_id, seq))""",
    """CREATE TABLE inbox (id CHAR(32) PRIMARY KEY, instance_id CHAR(32) NOT NULL, source_id CHAR(32) NOT NULL,
        state VARCHAR(16) NOT NULL, created_at DATETIME(6) NOT NULL, consumed_at DATETIME(6),
        KEY inbox_pending (state, created_at))""",
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _id() -> str:
    return uuid.uuid4().hex


def server_connect(database: str | None = DATABASE, wire: Wire | None = None):
    """A MySQLdb connection to WEAVE_DATABASE_URL's server (autocommit on, READ COMMITTED), counted into ``wire``."""
    db = settings.DATABASES["default"]
    options = {"database": database} if database else {}
    raw = MySQLdb.connect(
        host=db["HOST"] or "127.0.0.1",
        port=int(db["PORT"] or 3306),
        user=db["USER"],
        password=db["PASSWORD"] or "",
        charset="utf8mb4",
        autocommit=True,
        **options,
    )
    raw.query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    if wire is not None:
        wire_count(raw, wire)
    return raw


def floor_prepare(*, instances: int, steps: int) -> None:
    """The floor's database, tables re-created, with ``instances`` chains whose first task is QUEUED."""
    server = server_connect(None)
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    server.close()
    raw = server_connect()
    cursor = raw.cursor()
    for table in ("instance", "task", "attempt", "result_event", "inbox"):
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in SCHEMA:
        cursor.execute(statement)
    now = _now()
    rows = [(_id(), now) for _ in range(instances)]
    cursor.executemany(
        "INSERT INTO instance VALUES (%s, 'RUNNING', 0, %s, 1, %s)", [(i, steps, now) for i, now in rows]
    )
    cursor.executemany(
        "INSERT INTO task VALUES (%s, %s, 0, 'QUEUED', 0, 1, 0, NULL, %s, %s)",
        [(_id(), i, now, now) for i, now in rows],
    )
    raw.close()


def _claim(cursor, worker: str, batch: int) -> list[tuple[str, int]]:
    cursor.execute("START TRANSACTION")
    cursor.execute(
        "SELECT id, attempt_count FROM task WHERE state = 'QUEUED' ORDER BY priority DESC, created_at"
        f" LIMIT {batch} FOR UPDATE SKIP LOCKED"
    )
    tasks = sorted(cursor.fetchall())
    if not tasks:
        cursor.execute("ROLLBACK")  # nothing written: nothing to commit
        return []
    now = _now()
    lease = now + dt.timedelta(seconds=30)
    attempts = [(_id(), task_id, count + 1, worker, lease, now) for task_id, count in tasks]
    cursor.executemany("INSERT INTO attempt VALUES (%s, %s, %s, 'RUNNING', %s, %s, %s, NULL, NULL)", attempts)
    marks = ", ".join(["%s"] * len(tasks))
    cursor.execute(
        "UPDATE task SET state = 'LEASED', attempt_count = attempt_count + 1, revision = revision + 1,"
        f" updated_at = %s WHERE id IN ({marks})",
        [now, *(task_id for task_id, _ in tasks)],
    )
    cursor.execute("COMMIT")
    return [(task_id, attempt_id) for (attempt_id, task_id, *_) in attempts]


def _complete(cursor, task_id: str, attempt_id: str) -> None:
    now, result = _now(), '{"ok":true}'
    cursor.execute("START TRANSACTION")
    cursor.execute("SELECT instance_id FROM task WHERE id = %s FOR UPDATE", [task_id])
    (instance_id,) = cursor.fetchone()
    cursor.execute(
        "UPDATE attempt SET state = 'SUCCEEDED', finished_at = %s, result = %s WHERE id = %s AND state = 'RUNNING'",
        [now, result, attempt_id],
    )
    cursor.execute(
        "UPDATE task SET state = 'SUCCEEDED', result = %s, revision = revision + 1, updated_at = %s WHERE id = %s",
        [result, now, task_id],
    )
    event_id = _id()
    cursor.execute(
        "INSERT INTO result_event VALUES (%s, %s, 1, 'RESULT', 'SUCCEEDED', %s, %s)", [event_id, task_id, result, now]
    )
    cursor.execute("INSERT INTO inbox VALUES (%s, %s, %s, 'PENDING', %s, NULL)", [_id(), instance_id, event_id, now])
    cursor.execute("COMMIT")


def _consume(cursor, limit: int) -> int:
    """Consume up to ``limit`` inbox records in one transaction: each advances its instance to its next task."""
    cursor.execute("START TRANSACTION")
    cursor.execute(
        "SELECT id, instance_id FROM inbox WHERE state = 'PENDING' ORDER BY created_at"
        f" LIMIT {limit} FOR UPDATE SKIP LOCKED"
    )
    records = cursor.fetchall()
    if not records:
        cursor.execute("ROLLBACK")  # nothing written: nothing to commit
        return 0
    now = _now()
    instance_ids = sorted({instance_id for _, instance_id in records})
    marks = ", ".join(["%s"] * len(instance_ids))
    cursor.execute(f"SELECT id, step, steps FROM instance WHERE id IN ({marks}) ORDER BY id FOR UPDATE", instance_ids)
    instances = cursor.fetchall()
    record_marks = ", ".join(["%s"] * len(records))
    cursor.execute(
        f"UPDATE inbox SET state = 'CONSUMED', consumed_at = %s WHERE id IN ({record_marks})",
        [now, *(record_id for record_id, _ in records)],
    )
    cursor.execute(
        "UPDATE instance SET step = step + 1, revision = revision + 1, updated_at = %s,"
        f" state = IF(step >= steps, 'SUCCEEDED', state) WHERE id IN ({marks})",
        [now, *instance_ids],
    )
    following = [(_id(), instance_id, step + 1, now, now) for instance_id, step, steps in instances if step + 1 < steps]
    if following:
        cursor.executemany("INSERT INTO task VALUES (%s, %s, %s, 'QUEUED', 0, 1, 0, NULL, %s, %s)", following)
    cursor.execute("COMMIT")
    return len(records)


def _loop(work, stop) -> None:
    """Run ``work`` until ``stop``; an empty round sleeps, growing from 1 ms up to 50 ms."""
    idle = IDLE_FIRST
    while not stop.is_set():
        if work():
            idle = IDLE_FIRST
        else:
            time.sleep(idle)
            idle = min(idle * 2, IDLE_MOST)


def _worker(stop, results, batch: int, name: str) -> None:
    wire = Wire()
    raw = server_connect(wire=wire)
    cursor = raw.cursor()

    def work() -> bool:
        claims = _claim(cursor, name, batch)
        for task_id, attempt_id in claims:
            _complete(cursor, task_id, attempt_id)
        return bool(claims)

    _loop(work, stop)
    raw.close()
    results.put(wire)


def _runner(stop, results, limit: int) -> None:
    wire = Wire()
    raw = server_connect(wire=wire)
    cursor = raw.cursor()
    _loop(lambda: _consume(cursor, limit), stop)
    raw.close()
    results.put(wire)


@dataclass
class Run:
    seconds: float
    tasks: int
    wire: Wire
    latencies_ms: list[float]

    def row(self) -> str:
        """The figures under ``HEADER``."""
        statements, trips, commits = self.wire.per(self.tasks)
        p50, p95 = percentile(self.latencies_ms, 0.5), percentile(self.latencies_ms, 0.95)
        rate = self.tasks / self.seconds
        return f"{rate:>8.1f} {statements:>7.1f} {trips:>7.1f} {commits:>8.2f} {p50:>7.1f} {p95:>7.1f}"


def floor_run(*, workers: int, runners: int, set_based: bool, batch: int, timeout: float = 300) -> Run:
    """Time the prepared chains to the end with ``workers`` + ``runners`` processes."""
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    limit = SET_SIZE if set_based else 1
    processes = [context.Process(target=_runner, args=(stop, results, limit)) for _ in range(runners)] + [
        context.Process(target=_worker, args=(stop, results, batch, f"floor-{n}")) for n in range(workers)
    ]
    watcher = server_connect()
    cursor = watcher.cursor()
    started = time.perf_counter()
    for process in processes:
        process.start()
    try:
        while True:
            cursor.execute("SELECT COUNT(*) FROM instance WHERE state <> 'SUCCEEDED'")
            if cursor.fetchone()[0] == 0:
                break
            if time.perf_counter() - started > timeout or not all(p.is_alive() for p in processes):
                raise SystemExit("floor: a process died or the run timed out")
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    finally:
        stop.set()
    wire = wire_collect(results, processes)
    cursor.execute("SELECT COUNT(*) FROM task")
    tasks = cursor.fetchone()[0]
    # Step to step: the next task's creation after the previous task's attempt finished.
    cursor.execute(
        "SELECT TIMESTAMPDIFF(MICROSECOND, a.finished_at, n.created_at) FROM task t"
        " JOIN attempt a ON a.task_id = t.id JOIN task n ON n.instance_id = t.instance_id AND n.step = t.step + 1"
    )
    latencies = [row[0] / 1000 for row in cursor.fetchall()]
    watcher.close()
    return Run(seconds=seconds, tasks=tasks, wire=wire, latencies_ms=latencies)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--cells", default="1+1,4+1,4+2", help="workers+runners, comma-separated")
    parser.add_argument("--batch", type=int, default=1, help="tasks a worker claims per transaction")
    args = parser.parse_args(argv)
    print(f"{'variant':<10} {'cell':>5} {HEADER}")
    for cell in args.cells.split(","):
        workers, runners = (int(n) for n in cell.split("+"))
        for set_based in (False, True):
            floor_prepare(instances=args.instances, steps=args.steps)
            run = floor_run(workers=workers, runners=runners, set_based=set_based, batch=args.batch)
            variant = "set-based" if set_based else "per-item"
            print(f"{variant:<10} {cell:>5} {run.row()}")
