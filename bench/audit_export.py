"""An audit export of a million rows in constant memory: the workflow audit's JSON Lines export, streamed through
the admin, beside the naive export (every row loaded, then written).

    export WEAVE_SECRET_KEY=...
    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench audit_export --rows 1000000 [--naive 100000]

The rows live in their own database, ``weave_bench_export``, on the server WEAVE_DATABASE_URL names, filled on
first use: bench/seed.py's finished instances, and audits of 1 000 of them by INSERT … SELECT over MariaDB's
sequence table (five actions).
Prints, for ours over ``--rows`` and for the naive export over its first ``--naive`` rows: the rows written, the
seconds, rows per second, the batches' longest read, and the process's resident memory before and at its peak
(growth against the target of 50 MiB). Each export runs in a fresh process, so one's peak is not the other's.
"""

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import time

from django.db import connection

from bench.database import database_switch
from bench.seed import seed_instances, tenants_ensure
from bench.serving import ROOT, admin_client, rss_mib
from console import audit
from history.models import Namespace, WorkflowInstance, WorkflowOperation

DATABASE = "weave_bench_export"
TARGET_MIB = 50
INSTANCES = 1000
ACTIONS = ("workflow.pause", "workflow.resume", "workflow.cancel", "workflow.retry_step", "workflow.continue")


def fill(rows: int) -> None:
    """``rows`` workflow audits on the first bench namespace's instances, written by the server from its
    sequence table."""
    if WorkflowOperation.objects.count() >= rows:
        return
    tenants = tenants_ensure()
    if not WorkflowInstance.objects.exists():
        seed_instances(tenants, len(tenants) * INSTANCES, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    instances = WorkflowInstance.objects.filter(namespace=tenants[0][0]).order_by("id")
    ids = list(instances.values_list("id", flat=True)[:INSTANCES])
    WorkflowOperation.objects.all().delete()
    actions = ", ".join(f"'{action}'" for action in ACTIONS)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE pick (n INT PRIMARY KEY, id CHAR(32))")
        cursor.executemany("INSERT INTO pick VALUES (%s, %s)", list(enumerate(ids)))
        cursor.execute(
            f"INSERT INTO {WorkflowOperation._meta.db_table} (id, namespace_id, operation_id, actor_id, action, reason,"
            " evidence_ref, request_id, `before`, `after`, created_at, workflow_id, step_key)"
            f" SELECT MD5(seq), %s, MD5(seq + {rows}), REPEAT('a', 32), ELT(1 + MOD(seq, {len(ACTIONS)}), {actions}),"
            " CONCAT('maintenance window ', seq), CONCAT('OPS-', seq), '', '{\"paused\": false}',"
            " '{\"paused\": true}', TIMESTAMP'2026-01-01 00:00:00' + INTERVAL seq SECOND, pick.id, ''"
            f" FROM seq_1_to_{rows} JOIN pick ON pick.n = MOD(seq, {len(ids)})",
            [tenants[0][0].id],
        )
        cursor.execute(f"ANALYZE TABLE {WorkflowOperation._meta.db_table}")
        cursor.fetchall()


def export(kind: str, limit: int) -> dict:
    """One export in this process: ``ours`` through the admin's streamed view, ``naive`` every row loaded first."""
    client = admin_client(Namespace.objects.get(name="bench"), "bench-export")
    before, written = rss_mib(), 0
    started = time.perf_counter()
    if kind == "ours":
        response = client.get("/admin/history/workflowoperation/export/jsonl/")
        for chunk in response.streaming_content:
            written += chunk.count(b"\n")
            if written >= limit:
                break
    else:
        rows = list(WorkflowOperation.objects.order_by("-created_at", "-id")[:limit])
        lines = [json.dumps({"id": r.id, "reason": r.reason, "before": r.before, "after": r.after}) for r in rows]
        written = len(lines)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"kind": kind, "rows": written, "seconds": seconds, "before": before, "peak": peak}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--naive", type=int, default=100_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one export, as JSON
    args = parser.parse_args(argv)
    database_switch(DATABASE)
    if args.one:
        kind, limit = args.one.split(":")
        print(json.dumps(export(kind, int(limit))))
        return
    fill(args.rows)
    print(f"{WorkflowOperation.objects.count()} workflow audit rows; batch {audit.EXPORT_BATCH}")
    print(f"{'export':<7} {'rows':>9} {'seconds':>8} {'rows/s':>8} {'RSS MiB':>8} {'peak':>8} {'growth':>7}  target")
    for kind, limit in (("ours", args.rows), ("naive", args.naive)):
        child = [sys.executable, "-m", "bench", "audit_export", "--one", f"{kind}:{limit}"]
        done = subprocess.run(child, cwd=ROOT, check=True, capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        growth = result["peak"] - result["before"]
        rate = result["rows"] / result["seconds"]
        verdict = "met" if growth <= TARGET_MIB else "missed"
        print(
            f"{kind:<7} {result['rows']:>9} {result['seconds']:>8.1f} {rate:>8.0f} {result['before']:>8.1f}"
            f" {result['peak']:>8.1f} {growth:>7.1f}  ≤ {TARGET_MIB} MiB: {verdict}"
        )
