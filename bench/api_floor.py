"""Read API over HTTP beside its raw floor, at a small and a large scale: ours ≤ 2× the floor, large ≤ 1.2× small.

    export WEAVE_SECRET_KEY=...
    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench api_floor \
        [--scales 10000,1000000] [--reps 60]

Each scale lives in its own MariaDB database, ``weave_bench_api_<scale>`` on the server WEAVE_DATABASE_URL
names, seeded on first use with ``bench/seed.py``'s instances and activations parts at that scale (at
1 000 000: a million instances, 5 % of them in review, with seven timeline events each, and one step of 100 000
activations). Ours is the product under gunicorn; the floor is ``bench/floor_app.py``, a bare WSGI
callable with raw SQL and ``json``, on the same gunicorn (one sync worker each). Requests alternate
between the two so that machine noise hits both alike; each list is warmed with 5 requests first, so
the figures are of a warm pool. A timeline's page must be the same items on both sides (the run stops
otherwise). Prints per scale and list p50 / p95 in ms and ours/floor at p95 beside its target, then per
list ours' p95 at the largest scale over the smallest beside its target; and the buffer pool size the
server ran with (never changed here).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import httpx
from django.db import connection

from bench.database import buffer_pool_mib, database_switch, seed_summary_path
from bench.serving import ROOT, free_port, percentile, reader_token, serve
from history.models import Namespace, WorkflowInstance

FLOOR_TARGET = 2.0
SCALE_TARGET = 1.2
WARMUP = 5


def seeded(scale: int) -> dict:
    """This scale's seed summary, seeding its database first when no run did."""
    if not seed_summary_path().exists():
        parts = ["--scale", str(scale / 1_000_000), "--parts", "instances,activations"]
        subprocess.run([sys.executable, "-m", "bench", "seed", *parts], cwd=ROOT, check=True, env=os.environ)
    return json.loads(seed_summary_path().read_text())


def lists(seed: dict, namespace: Namespace) -> dict[str, tuple[str, dict]]:
    """Each measured list: its path under /v1 (ours) and /floor (the floor), and its query."""
    chain = seed["activations"]
    # A finished instance of the namespace: the newest, as the instance list shows it first.
    plain = WorkflowInstance.objects.filter(namespace=namespace, state="SUCCEEDED").order_by("-updated_at").first()
    return {
        "instances": ("/workflows", {"limit": "20"}),
        "instances in review": ("/workflows", {"limit": "20", "state": "NEEDS_REVIEW"}),
        "timeline, 7 events": (f"/workflows/{plain.id}/events", {"limit": "20"}),
        "timeline, long": (f"/workflows/{chain['instance_id']}/events", {"limit": "20"}),
        "activations": (f"/workflows/{chain['instance_id']}/steps/{chain['step_key']}/activations", {"limit": "20"}),
    }


def measure(scale: int, reps: int) -> dict[str, dict[str, list[float]]]:
    """Per list, ours' and the floor's milliseconds per request at this scale."""
    database_switch(f"weave_bench_api_{scale}")
    seed = seeded(scale)
    namespace = Namespace.objects.get(name=seed["namespace"])
    token = reader_token(namespace)
    measured = lists(seed, namespace)
    connection.close()
    ports = {"ours": free_port(), "floor": free_port()}
    servers = [serve(ports["ours"]), serve(ports["floor"], app="bench.floor_app:application")]
    prefixes = {"ours": "/v1", "floor": "/floor"}
    timings: dict[str, dict[str, list[float]]] = {}
    try:
        clients = {
            name: httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            for name, port in ports.items()
        }
        for label, (path, params) in measured.items():
            timings[label] = {name: [] for name in clients}
            for rep in range(WARMUP + reps):
                pages = {}
                for name, client in clients.items():
                    started = time.perf_counter()
                    response = client.get(prefixes[name] + path, params=params).raise_for_status()
                    elapsed = (time.perf_counter() - started) * 1000
                    pages[name] = response.json()["data"]["items"]
                    if not pages[name]:
                        raise SystemExit(f"{name} {label}: an empty page, the seed is not what this bench reads")
                    if rep >= WARMUP:
                        timings[label][name].append(elapsed)
                if rep == 0 and path.endswith("/events") and pages["ours"] != pages["floor"]:
                    raise SystemExit(f"{label}: the floor's items are not ours")
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    return timings


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="10000,1000000", help="instances per database, comma-separated")
    parser.add_argument("--reps", type=int, default=60, help="measured requests per list and side")
    args = parser.parse_args(argv)
    scales = sorted(int(s) for s in args.scales.split(","))
    if args.reps < 20:
        parser.error("--reps: at least 20 (a p95 of fewer is one request)")
    results = {scale: measure(scale, args.reps) for scale in scales}
    pool = buffer_pool_mib()
    print(f"innodb_buffer_pool_size {pool} MiB (the server's, unchanged); warm, {args.reps} requests each")
    print(
        f"{'list':<22} {'instances':>10} {'ours p50':>9} {'ours p95':>9} {'floor p50':>10} {'floor p95':>10} "
        f"{'ours/floor p95':>15} {'target':>6}"
    )
    for scale, timings in results.items():
        for label, sides in timings.items():
            ours, floor = sides["ours"], sides["floor"]
            print(
                f"{label:<22} {scale:>10} {statistics.median(ours):>9.1f} {percentile(ours, 0.95):>9.1f}"
                f" {statistics.median(floor):>10.1f} {percentile(floor, 0.95):>10.1f}"
                f" {percentile(ours, 0.95) / percentile(floor, 0.95):>15.2f} {FLOOR_TARGET:>6.1f}"
            )
    small, large = results[scales[0]], results[scales[-1]]
    print(f"{'list':<22} ours p95 at {scales[-1]} / at {scales[0]} (target ≤ {SCALE_TARGET}), the floor's beside it")
    for label in small:
        ours = percentile(large[label]["ours"], 0.95) / percentile(small[label]["ours"], 0.95)
        floor = percentile(large[label]["floor"], 0.95) / percentile(small[label]["floor"], 0.95)
        print(f"{label:<22} ours {ours:.2f}, floor {floor:.2f}")
