"""Engine throughput and recovery operations on one Galera node beside the same runs spread over three
nodes, in one run, with the cluster's conflict rate for each.

    scripts/galera.sh start && WEAVE_SECRET_KEY=… python -m bench cluster [--instances 60] [--cells 1+1,3+3] \
        [--ops retry-step,continue] [--clients 1,4]

Runs the benches ``engine_throughput`` and ``recovery_ops`` twice, on databases of their own: once
with every process and client on node 1 (``mysql://…:3311/weave_bench_cluster_<bench>_one``), once with the
three-node URL, where each runner and worker process and each recovery client starts at a node of its own
(``WEAVE_DATABASE_NODE``, ``pin_node``), so the writes come from every node. Around each run it reads the
nodes' ``wsrep`` counters: transactions committed, and certification conflicts (failed certification, or
aborted by a replicated write). Prints the tables, the three-node / one-node ratio of tasks/s per cell and
of operations/s per operation and client count, and conflicts per thousand commits. Changes no server
setting.
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


def _run(url: str, command: list[str], rate: re.Pattern) -> tuple[str, dict[str, float], dict[str, int]]:
    """The bench's table, its rates by row (``rate``: the row's name, then its rate), and the cluster's
    counters over the run."""
    before = _counters()
    table = subprocess.run(
        [sys.executable, "-m", "bench", *command],
        cwd=ROOT,
        env={**os.environ, "WEAVE_DATABASE_URL": url},
        capture_output=True,
        text=True,
    )
    if table.returncode != 0:
        raise SystemExit(f"{' '.join(command)} on {url} failed:\n{table.stdout}{table.stderr[-3000:]}")
    table = table.stdout
    after = _counters()
    rates = {m.group(1): float(m.group(2)) for m in rate.finditer(table)}
    return table, rates, {name: after[name] - before[name] for name in COUNTERS}


# engine_throughput: "weave  1+1  62.3 …" → {"1+1": tasks/s}; recovery_ops: "RetryStep  4  12.1 / 20.3  55.0 …"
# → {"RetryStep 4": ours ops/s}.
ENGINE_RATE = re.compile(r"^weave\s+(\S+)\s+([\d.]+)", re.MULTILINE)
RECOVERY_RATE = re.compile(r"^(\w+\s+\d+)\s+[\d.]+ /\s+[\d.]+\s+([\d.]+)", re.MULTILINE)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=60)
    parser.add_argument("--cells", default="1+1,3+3")
    parser.add_argument("--ops", default="retry-step,continue")
    parser.add_argument("--clients", default="1,4")
    args = parser.parse_args(argv)
    engine = ["engine_throughput", "--instances", str(args.instances), "--cells", args.cells]
    recovery = ["recovery_ops", "--instances", "12", "--clients", args.clients, "--ops", args.ops]
    hosts = ",".join(f"127.0.0.1:{port}" for port in NODES)
    # A database per bench and placement: the engine bench checks its whole database at its end.
    urls = {
        "one node": f"mysql://root@127.0.0.1:{NODES[0]}/weave_bench_cluster_{{}}_one",
        "three nodes": f"mysql://root@{hosts}/weave_bench_cluster_{{}}_three",
    }
    for what, command, rate, unit in (
        ("engine", engine, ENGINE_RATE, "tasks/s"),
        ("recovery", recovery, RECOVERY_RATE, "ops/s"),
    ):
        runs = {name: _run(url.format(what), command, rate) for name, url in urls.items()}
        for name, (table, _, counts) in runs.items():
            conflicts = counts["wsrep_local_cert_failures"] + counts["wsrep_local_bf_aborts"]
            commits = counts["wsrep_local_commits"]
            per_thousand = 1000 * conflicts / max(commits, 1)
            print(f"== {what}, {name}: {commits} commits, {conflicts} conflicts ({per_thousand:.1f} per 1000)")
            print(table)
        one, three = runs["one node"][1], runs["three nodes"][1]
        for row in one:
            ratio = three[row] / one[row]
            print(f"{what} {row}: {three[row]:.1f} {unit} on three nodes vs {one[row]:.1f} on one: {ratio:.2f}x")
        print()
