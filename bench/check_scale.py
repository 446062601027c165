"""weave_check time per instance from the smallest scale up: it should stay flat (target ≤ 1.3×).

    export WEAVE_SECRET_KEY=...
    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench check_scale \
        --scales 10000,100000[,1000000] [--repeat 2]

Each scale lives in its own MariaDB database, ``weave_bench_check_<scale>`` on the server
WEAVE_DATABASE_URL names, created, migrated and filled on first use with ``bench/seed.py``'s
finished one-task instances (instance, gate, two steps, activation, task, attempt, result event,
inbox record, seven timeline events each). The histories are clean:
the bench fails if ``weave_check`` finds anything. Prints, per scale, the seconds of the best of
``--repeat`` full checks, µs per instance, the ratio to the smallest scale beside the target, the
buffer-pool pages read from disk during that check, this process's resident memory before the scale's
checks and its peak after them (flat: the larger scale's checks hold no more), and the seconds of each
rule; plus the buffer pool size the server ran with (never changed here).
"""

import argparse
import datetime as dt
import time

from django.db import connection

from bench.database import buffer_pool_mib, database_switch
from bench.seed import seed_instances, tenants_ensure
from bench.serving import rss_mib
from engine import check
from history.models import WorkflowInstance

TARGET = 1.3


def seed(scale: int) -> float:
    """Seconds spent filling this scale's database (0 when an earlier run did)."""
    if WorkflowInstance.objects.exists():
        return 0.0
    started = time.monotonic()
    seed_instances(tenants_ensure(), scale, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"ANALYZE TABLE {connection.ops.quote_name(table)}")
            cursor.fetchall()
    return time.monotonic() - started


def pages_read() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'")
        return int(cursor.fetchone()[1])


def run_check() -> tuple[float, int, dict[str, float]]:
    """Seconds of one full check, the pages it read from disk, and the seconds of each rule."""
    per_rule, found = {}, []
    reads = pages_read()
    started = time.monotonic()
    for rule in check.CHECKS:
        rule_started = time.monotonic()
        found.extend(rule())
        per_rule[rule.__name__.lstrip("_")] = time.monotonic() - rule_started
    seconds = time.monotonic() - started
    if found:
        raise SystemExit(f"the seeded history is not clean: {found[:5]}")
    return seconds, pages_read() - reads, per_rule


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="10000,100000", help="instances per database, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="full checks per scale; the best counts")
    args = parser.parse_args(argv)
    scales = sorted(int(s) for s in args.scales.split(","))
    database_switch(f"weave_bench_check_{scales[0]}")
    pool = buffer_pool_mib()
    print(f"innodb_buffer_pool_size {pool} MiB (the server's, unchanged)")
    print(
        f"{'instances':>10} {'seed s':>8} {'check s':>8} {'µs/inst':>8} {'ratio':>6} {'target':>6} {'pages read':>11}"
        f" {'RSS MiB':>8} {'peak MiB':>8}"
    )
    base = None
    for scale in scales:
        database_switch(f"weave_bench_check_{scale}")
        seeded = seed(scale)
        rss = rss_mib()
        seconds, reads, per_rule = min((run_check() for _ in range(args.repeat)), key=lambda run: run[0])
        per_instance = seconds / scale * 1e6
        base = base or per_instance
        print(
            f"{scale:>10} {seeded:>8.1f} {seconds:>8.2f} {per_instance:>8.1f} {per_instance / base:>6.2f}"
            f" {TARGET:>6.1f} {reads:>11} {rss:>8.1f} {rss_mib(field='VmHWM'):>8.1f}"
        )
        print("           " + ", ".join(f"{name} {s:.2f}" for name, s in per_rule.items()), flush=True)
