"""Admin: the console's pages at full size, ours vs the same ModelAdmin with Django's defaults.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench python -m bench admin_pages [--reps 10]
    python -m bench admin_pages --private 1.0 [--reps 10] [--page home --page "instance page"]

Needs the history of bench/seed.py (its instances and activations parts). The default variant is the same
ModelAdmin served by a second admin site with Django's paginator, full result counts and change list
(bench/default_admin.py). Both are measured in one run, interleaved, in-process through the test client;
prints p50/p95 in milliseconds, SQL queries per page and ours/default.

With ``--private SCALE`` the bench runs on a MariaDB server of its own (bench/private_server.py: the server's
defaults, a 128 MiB pool), seeded at SCALE the first time, and restarts it before each page (once requested
before, so that this process has rendered it): the page's first request after the restart reads from a cold
pool (the system's file cache stays as it is) and is printed as ``cold``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.database import buffer_pool_mib, database_ready, seed_summary_path
from bench.private_server import PrivateServer
from bench.serving import ROOT, admin_client, percentile
from history.models import Namespace


def _pages(seed: dict) -> dict[str, str]:
    instance = seed["activations"]["instance_id"]
    instances = "history/workflowinstance/"
    return {
        "home (review queue)": "",
        "instance changelist": instances,
        "instances in review": f"{instances}?state__exact=NEEDS_REVIEW",
        "instances by review age": f"{instances}?o=5",
        "instances searched": f"{instances}?q=order-1234",
        "task changelist": "history/task/",
        "workflow audit": "history/workflowoperation/",
        "instance page": f"{instances}{instance}/change/",
        # The engine's records, as an operator filters them during an incident.
        "steps": "history/step/",
        "steps failed": "history/step/?state__exact=FAILED",
        "steps of a kind": "history/step/?kind__exact=TASK",
        "activations": "history/activation/",
        "activations in review": "history/activation/?state__exact=NEEDS_REVIEW",
        "attempts unknown": "history/attempt/?state__exact=UNKNOWN",
        "result events unknown": "history/resultevent/?kind__exact=UNKNOWN",
        "gates": "history/gate/",
        "gates closed": "history/gate/?open__exact=0",
    }


def _timed(client: Client, url: str) -> float:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, (url, response.status_code)
    return elapsed


def _private(scale: float) -> PrivateServer:
    """The bench's own server, its database seeded at ``scale`` once."""
    server = PrivateServer(f"admin-{scale:g}")
    server.start()
    url = server.use(f"weave_admin_{str(scale).replace('.', '_')}")
    database_ready()
    if not seed_summary_path().exists():
        seed = [sys.executable, "-m", "bench", "seed", "--scale", str(scale), "--parts", "instances,activations"]
        subprocess.run(seed, cwd=ROOT, check=True, env={**os.environ, "WEAVE_DATABASE_URL": url})
    return server


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--private", type=float, metavar="SCALE", help="on the bench's own server, cold then warm")
    parser.add_argument("--page", action="append", help="only the pages whose name (as printed) begins so")
    args = parser.parse_args(argv)
    server = _private(args.private) if args.private else None
    try:
        _measure(args, server)
    finally:
        if server is not None:
            server.stop()


def _measure(args, server: PrivateServer | None) -> None:
    seed = json.loads(seed_summary_path().read_text())
    client = admin_client(Namespace.objects.get(name=seed["namespace"]))
    pool = buffer_pool_mib()
    print(f"{seed['sizes']} on a {pool} MiB buffer pool" + (", the server restarted before each page" * bool(server)))
    print(f"{'page':<24} {'variant':<8} {'queries':>7} {'cold ms':>9} {'p50 ms':>9} {'p95 ms':>9}")
    pages = _pages(seed)
    unknown = [name for name in args.page or [] if not any(page.startswith(name) for page in pages)]
    if unknown:
        raise SystemExit(f"--page: no page named {', '.join(unknown)}; the pages: {', '.join(pages)}")
    for name, path in pages.items():
        if args.page and not any(name.startswith(wanted) for wanted in args.page):
            continue
        variants = {"ours": f"/admin/{path}", "default": f"/bench-default-admin/{path}"}
        counts, cold, timings = {}, {}, {label: [] for label in variants}
        for label, url in variants.items():
            if server is not None:
                # The page once before the restart: what the cold request then measures is the server's empty
                # pool, not this process's first rendering of the page (its templates, its lazy imports).
                client.get(url)
                server.restart()
            cold[label] = _timed(client, url)
            with CaptureQueriesContext(connection) as queries:
                client.get(url)
            counts[label] = len(queries)
        for _ in range(args.reps):
            for label, url in variants.items():
                timings[label].append(_timed(client, url))
        for label, values in timings.items():
            p50, p95 = statistics.median(values), percentile(values, 0.95)
            first = f"{cold[label]:>9.1f}" if server is not None else f"{'-':>9}"
            print(f"{name:<24} {label:<8} {counts[label]:>7} {first} {p50:>9.1f} {p95:>9.1f}")
        ratio = statistics.median(timings["ours"]) / statistics.median(timings["default"])
        print(f"{name:<24} ours/default {ratio:.2f}")
