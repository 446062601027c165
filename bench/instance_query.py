"""Instance query: GET /v1/workflows with each filter, ours (keyset, index scans) vs the naive list.

    export WEAVE_SECRET_KEY=...
    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/any python -m bench instance_query \
        --size 1000 [--size 1000000] [--reps 30] [--deep 10000]

Each size lives in its own MariaDB database, ``weave_bench_iq_<size>`` on the server
WEAVE_DATABASE_URL names, created, migrated and filled on first use with ``INSERT … SELECT`` from
MariaDB's sequence engine. The naive list is a DRF ListAPIView with a django-filter FilterSet and
LimitOffsetPagination. Serves both through gunicorn on 127.0.0.1, measures every request over real
HTTP, interleaving the variants, and prints per filter: SQL queries per request (counted in
process) and p50/p95 ms of page 1 and of the page ``--deep`` rows in (capped by the rows that
match) for ours and the naive list.
"""

import argparse
import statistics
import sys
import time

import httpx
from django.db import connection, transaction
from django.http import QueryDict
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.database import database_switch
from bench.naive import InstanceFilter
from bench.serving import free_port, percentile, serve
from history import models as m
from history.credentials import credential_issue
from history.tenancy import namespace_ensure

START = "2026-01-01 00:00:00"
# Per 1 000 instances: 900 SUCCEEDED, 50 RUNNING (5 paused), 20 NEEDS_REVIEW, 20 FAILED, 10 CANCELLED.
STATE = (
    "CASE WHEN seq % 1000 < 900 THEN 'SUCCEEDED' WHEN seq % 1000 < 950 THEN 'RUNNING' "
    "WHEN seq % 1000 < 970 THEN 'NEEDS_REVIEW' WHEN seq % 1000 < 990 THEN 'FAILED' ELSE 'CANCELLED' END"
)
CAUSES = ("task_outcome_unknown", "task_budget_exhausted", "poll_exhausted", "wait_expired")
FILTERS = {
    "none": {},
    "state": {"state": "NEEDS_REVIEW"},
    "state x2": {"state": ["RUNNING", "FAILED"]},
    "review_cause": {"review_cause": "task_outcome_unknown"},
    "definition": {"definition": "flow-a"},
    "definition+version": {"definition": "flow-a", "version": "2"},
    "business_key": {"business_key": "order-777"},
    "business_key_prefix": {"business_key_prefix": "order-99"},
    "paused": {"paused": "true"},
    "stop_kind": {"stop_kind": "CANCEL"},
    "queue": {"queue": "q-b"},
    "created_after": {"created_after": "2026-01-01T00:00:00Z"},
    "updated_before": {"updated_before": "2027-01-01T00:00:00Z"},
    "in_review_longer_than": {"in_review_longer_than": "3600"},
    "order=created_at": {"order": "created_at"},
    "order=review_since": {"order": "review_since"},
    "state+def+review_since": {"state": "NEEDS_REVIEW", "definition": "flow-b", "order": "review_since"},
}


def seed(size: int) -> None:
    """The bench namespace with 4 definitions over 2 queues and ``size`` instances, once per database."""
    database_switch(f"weave_bench_iq_{size}")
    ns, _, queues = namespace_ensure(name="iq", application="bench", queues=["q-a", "q-b"])
    if m.WorkflowInstance.objects.filter(namespace_id=ns.id).exists():
        return
    definitions = []
    for name, version, queue in (
        ("flow-a", 1, "q-a"),
        ("flow-a", 2, "q-a"),
        ("flow-b", 1, "q-b"),
        ("flow-c", 1, "q-b"),
    ):
        spec = {"steps": [{"key": "work", "kind": "TASK", "after": [], "handler": "demo.echo", "queue": queue}]}
        definitions.append(
            m.WorkflowDefinition.objects.create(namespace=ns, name=name, version=version, spec=spec, queues=[queue])
        )
    review = "seq % 1000 >= 950 AND seq % 1000 < 970"
    created = f"DATE_ADD('{START}', INTERVAL seq SECOND)"
    updated = f"DATE_ADD('{START}', INTERVAL seq + seq % 997 SECOND)"
    columns = {
        "id": "LOWER(LPAD(HEX(seq), 32, '0'))",
        "namespace_id": f"'{ns.id}'",
        "definition_id": "ELT(1 + seq % 4, {})".format(", ".join(f"'{d.id}'" for d in definitions)),
        "business_key": "CONCAT('order-', seq)",
        "state": STATE,
        "paused": "seq % 1000 >= 900 AND seq % 1000 < 905",
        "stop_kind": "CASE WHEN seq % 1000 >= 990 THEN 'CANCEL' WHEN seq % 1000 >= 970 THEN 'FAIL' END",
        "stop_reason": "''",
        "revision": "3",
        "control_revision": "1",
        "input": "'{}'",
        "review_reason": f"IF({review}, 'bench', '')",
        "review_cause": f"IF({review}, ELT(1 + seq % 4, {', '.join(repr(c) for c in CAUSES)}), '')",
        "review_step_key": f"IF({review}, 'work', '')",
        "review_since": f"IF({review}, {updated}, NULL)",
        "created_at": created,
        "updated_at": updated,
    }
    table = m.WorkflowInstance._meta.db_table
    names = ", ".join(f"`{m.WorkflowInstance._meta.get_field(f.removesuffix('_id')).column}`" for f in columns)
    chunk = 100_000
    started = time.monotonic()
    with connection.cursor() as cursor:
        for low in range(1, size + 1, chunk):
            high = min(size, low + chunk - 1)
            with transaction.atomic():
                cursor.execute(
                    f"INSERT INTO `{table}` ({names}) SELECT {', '.join(columns.values())} FROM seq_{low}_to_{high}"
                )
            sys.stderr.write(f"\r{high}/{size} instances, {time.monotonic() - started:.0f} s")
        cursor.execute(f"ANALYZE TABLE `{table}`")
        cursor.fetchall()
    sys.stderr.write("\n")


def measure(*, reps: int, naive_reps: int, deep: int) -> list[tuple]:
    namespace = m.Namespace.objects.get(name="iq")
    token = credential_issue(
        namespace_id=namespace.id,
        application_id=None,
        actor_id="e" * 32,
        label="bench",
        scopes=[m.Scope.READ],
        queue_access="*",
    ).token
    headers = {"Authorization": f"Bearer {token}"}

    def query_count(path: str) -> tuple[int, float]:
        """SQL queries of one request served in process, and its milliseconds."""
        started = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            response = Client(HTTP_AUTHORIZATION=headers["Authorization"]).get(path)
        assert response.status_code == 200, (path, response.status_code, response.content[:300])
        return len(queries), (time.perf_counter() - started) * 1000

    results = []
    port = free_port()
    server = serve(port, timeout=900)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as http:
            for name, params in FILTERS.items():
                # Bench-side only: how many rows match, to cap the deep page inside them.
                matches = InstanceFilter(httpx_params(params), queryset=m.WorkflowInstance.objects.all()).qs.count()
                depth = max(0, min(deep, matches - 20))
                cursor = None
                for _ in range(depth // 100):
                    data = http.get("/v1/workflows", params={**params, "limit": "100", **cursor_of(cursor)})
                    cursor = data.raise_for_status().json()["data"].get("next_cursor")
                variants = {
                    "ours first": ("/v1/workflows", {**params, "limit": "20"}),
                    "ours deep": ("/v1/workflows", {**params, "limit": "20", **cursor_of(cursor)}),
                    "naive first": ("/naive/workflows", {**params, "limit": "20"}),
                    "naive deep": ("/naive/workflows", {**params, "limit": "20", "offset": str(depth // 100 * 100)}),
                }
                counted = {label: query_count(f"{url}?{httpx.QueryParams(p)}") for label, (url, p) in variants.items()}
                queries = {label: count for label, (count, _) in counted.items()}
                # The naive list can take seconds a request at 1M: its counted request is a sample too.
                timings = {label: [ms] if label.startswith("naive") else [] for label, (_, ms) in counted.items()}
                for rep in range(reps):
                    for label, (url, p) in variants.items():
                        if label.startswith("naive") and rep >= naive_reps - 1:
                            continue
                        started = time.perf_counter()
                        http.get(url, params=p).raise_for_status()
                        timings[label].append((time.perf_counter() - started) * 1000)
                results.append((name, matches, depth // 100 * 100, queries, timings))
    finally:
        server.terminate()
        server.wait()
    return results


def cursor_of(cursor: str | None) -> dict:
    return {"cursor": cursor} if cursor else {}


def httpx_params(params: dict):
    query = QueryDict(mutable=True)
    for key, value in params.items():
        query.setlist(key, value if isinstance(value, list) else [value])
    return query


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="instances in the database of this size")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument(
        "--naive-reps",
        type=int,
        default=None,
        help="timed requests of the naive list (default --reps; its counted request is one more sample)",
    )
    parser.add_argument("--deep", type=int, default=10_000, help="rows before the deep page")
    args = parser.parse_args(argv)
    seed(args.size)
    naive_reps = args.reps if args.naive_reps is None else args.naive_reps
    results = measure(reps=args.reps, naive_reps=naive_reps, deep=args.deep)
    print(f"instances {args.size}, limit 20, reps {args.reps} (naive {naive_reps}); per variant: queries, p50, p95 ms")
    head = ("ours first", "ours deep", "naive first", "naive deep")
    print(f"{'filter':<24} {'rows':>8} {'depth':>6} " + " ".join(f"{h:>24}" for h in head))
    for name, matches, depth, queries, timings in results:
        cells = [
            f"{queries[label]:>3} {statistics.median(values):>9.2f} {percentile(values, 0.95):>9.2f}"
            for label, values in timings.items()
        ]
        print(f"{name:<24} {matches:>8} {depth:>6} " + " ".join(f"{c:>24}" for c in cells))
