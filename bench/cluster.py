"""Engine throughput on one Galera node beside the same cells spread over three nodes, in one run, with the
cluster's conflict rate for each.

    scripts/galera.sh start && WEAVE_SECRET_KEY=… python bench/cluster.py [--instances 60] [--cells 1+1,3+3]

Runs ``bench/engine_throughput.py`` twice on databases of its own: once with every process on node 1
(``mysql://…:3311/weave_bench_cluster_one``), once with the three-node URL, where each runner and worker
process starts at a node of its own (``WEAVE_DATABASE_NODE``), so the writes come from every node. Between
the runs it reads the nodes' ``wsrep`` counters: transactions committed, and certification conflicts
(failed certification, or aborted by a replicated write). Prints both tables, the three-node / one-node
ratio of tasks/s per cell, and conflicts per thousand commits. Changes no server setting.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODES = (3311, 3312, 3313)
COUNTERS = ("wsrep_local_commits", "wsrep_local_cert_failures", "wsrep_local_bf_aborts")


def _counters() -> dict[str, int]:
    totals = dict.fromkeys(COUNTERS, 0)
    for port in NODES:
        for name in COUNTERS:
            out = subprocess.run(
                ["mariadb", "-h127.0.0.1", f"-P{port}", "-uroot", "-N", "-B", "-e", f"SHOW STATUS LIKE '{name}'"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            totals[name] += int(out[1])
    return totals


def _run(url: str, args) -> tuple[str, dict[str, float], dict[str, int]]:
    """The bench's table, tasks/s of weave per cell, and the cluster's counters over the run."""
    before = _counters()
    table = subprocess.run(
        [sys.executable, "bench/engine_throughput.py", "--instances", str(args.instances), "--cells", args.cells],
        cwd=ROOT,
        env={**os.environ, "WEAVE_DATABASE_URL": url},
        capture_output=True,
        text=True,
    )
    if table.returncode != 0:
        raise SystemExit(f"engine_throughput.py on {url} failed:\n{table.stdout}{table.stderr[-3000:]}")
    table = table.stdout
    after = _counters()
    rates = {m.group(1): float(m.group(2)) for m in re.finditer(r"^weave\s+(\S+)\s+([\d.]+)", table, re.MULTILINE)}
    return table, rates, {name: after[name] - before[name] for name in COUNTERS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=60)
    parser.add_argument("--cells", default="1+1,3+3")
    args = parser.parse_args()
    hosts = ",".join(f"127.0.0.1:{port}" for port in NODES)
    runs = {
        "one node": _run(f"mysql://root@127.0.0.1:{NODES[0]}/weave_bench_cluster_one", args),
        "three nodes": _run(f"mysql://root@{hosts}/weave_bench_cluster_three", args),
    }
    for name, (table, _, counts) in runs.items():
        conflicts = counts["wsrep_local_cert_failures"] + counts["wsrep_local_bf_aborts"]
        per_thousand = 1000 * conflicts / max(counts["wsrep_local_commits"], 1)
        print(
            f"== {name}: {counts['wsrep_local_commits']} commits, {conflicts} conflicts ({per_thousand:.1f} per 1000)"
        )
        print(table)
    one, three = runs["one node"][1], runs["three nodes"][1]
    for cell in one:
        ratio = three[cell] / one[cell]
        print(f"{cell}: weave {three[cell]:.1f} tasks/s on three nodes vs {one[cell]:.1f} on one: {ratio:.2f}x")


if __name__ == "__main__":
    main()
