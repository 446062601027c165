"""Read API: page 1 vs a page deep in a large history, ours (keyset) vs the naive LimitOffset list.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench python -m bench read_api [--reps 40] [--deep 50000]

Needs the history of bench/seed.py. Serves the product through gunicorn on 127.0.0.1, measures
every request over real HTTP, interleaving the four variants of each list so that machine noise
hits them alike, and prints per list: SQL queries per request (counted in-process), p50/p95 in
milliseconds, deep/first for both implementations and ours/naive.
"""

import argparse
import json
import statistics
import time

import httpx
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.database import seed_summary_path
from bench.serving import free_port, percentile, reader_token, serve
from history.models import Namespace

PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"


def deep_cursor(http: httpx.Client, url: str, depth: int) -> str:
    """Walk pages of 100 until ``depth`` rows are behind the returned cursor."""
    cursor = None
    for _ in range(depth // 100):
        params = {"limit": "100", **({"cursor": cursor} if cursor else {})}
        data = http.get(url, params=params).raise_for_status().json()["data"]
        cursor = data["next_cursor"]
    return cursor


def query_count(path: str, headers: dict) -> int:
    client = Client(**headers)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200, (path, response.status_code, response.content[:300])
    return len(queries)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--deep", type=int, default=50_000, help="rows before the deep page")
    args = parser.parse_args(argv)
    if args.deep < 100:
        parser.error("--deep: at least 100 (the deep cursor is reached in pages of 100)")
    seed = json.loads(seed_summary_path().read_text())
    namespace = Namespace.objects.get(name=seed["namespace"])
    token = reader_token(namespace)
    headers = {"Authorization": f"Bearer {token}"}
    w_signals = seed["signals"]
    w_act, w_poll = seed["activations"], seed["rounds"]
    lists = {
        "activations": (f"/workflows/{w_act['instance_id']}/steps/{w_act['step_key']}/activations", ""),
        "poll rounds": (
            f"/workflows/{w_poll['instance_id']}/steps/{w_poll['step_key']}/activations/{w_poll['activation_id']}"
            "/rounds",
            "",
        ),
        "signals": (f"/workflows/{w_signals}/signals", ""),
    }
    server = serve(PORT)
    results = []
    try:
        with httpx.Client(base_url=BASE, headers=headers, timeout=30) as http:
            for name, (path, _) in lists.items():
                ours = f"/v1{path}"
                naive = f"/naive{path}"
                depth = min(args.deep, seed["sizes"][name.replace("poll ", "")] - 100)
                cursor = deep_cursor(http, ours, depth)
                variants = {
                    "ours first": (ours, {"limit": "20"}),
                    "ours deep": (ours, {"limit": "20", "cursor": cursor}),
                    "naive first": (naive, {"limit": "20"}),
                    "naive deep": (naive, {"limit": "20", "offset": str(depth)}),
                }
                django_headers = {"HTTP_AUTHORIZATION": headers["Authorization"]}
                queries = {
                    label: query_count(f"{url}?{httpx.QueryParams(params)}", django_headers)
                    for label, (url, params) in variants.items()
                }
                timings = {label: [] for label in variants}
                for _ in range(args.reps):
                    for label, (url, params) in variants.items():
                        started = time.perf_counter()
                        http.get(url, params=params).raise_for_status()
                        timings[label].append((time.perf_counter() - started) * 1000)
                results.append((name, depth, queries, timings))
    finally:
        server.terminate()
        server.wait()

    print(f"{'list':<12} {'variant':<12} {'queries':>7} {'p50 ms':>8} {'p95 ms':>8}")
    for name, depth, queries, timings in results:
        for label, values in timings.items():
            p50, p95 = statistics.median(values), percentile(values, 0.95)
            print(f"{name:<12} {label:<12} {queries[label]:>7} {p50:>8.2f} {p95:>8.2f}")
        med = {label: statistics.median(values) for label, values in timings.items()}
        print(
            f"{name:<12} depth {depth}: deep/first ours {med['ours deep'] / med['ours first']:.2f}, "
            f"naive {med['naive deep'] / med['naive first']:.2f}; ours/naive first "
            f"{med['ours first'] / med['naive first']:.2f}, deep {med['ours deep'] / med['naive deep']:.2f}"
        )
