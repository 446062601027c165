"""Admin: changelists and an instance page at full size, ours vs the same ModelAdmin with Django's defaults.

    WEAVE_DATABASE_URL=mysql://root@127.0.0.1:3306/weave_bench python -m bench admin_pages [--reps 10]

Needs the history of bench/seed.py. The default variant is the same ModelAdmin served by a
second admin site with Django's paginator and full result counts (bench/urls.py). Both are
measured in one run, interleaved, in-process through the test client; prints p50/p95 in
milliseconds, SQL queries per page and ours/default.
"""

import argparse
import json
import statistics
import time

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.database import seed_summary_path
from bench.serving import percentile
from history.models import Namespace, Operator


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args(argv)
    seed = json.loads(seed_summary_path().read_text())
    namespace = Namespace.objects.get(name=seed["namespace"])
    user, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True, "is_superuser": True})
    Operator.objects.update_or_create(
        user=user, defaults={"namespace": namespace, "actor_id": "e" * 32, "queue_access": "*"}
    )
    client = Client()
    client.force_login(user)
    instance = seed["activations"]["instance_id"]
    pages = {
        "instance changelist": "history/workflowinstance/",
        "task changelist": "history/task/",
        "instance page": f"history/workflowinstance/{instance}/change/",
    }
    print(f"{'page':<22} {'variant':<8} {'queries':>7} {'p50 ms':>9} {'p95 ms':>9}")
    for name, path in pages.items():
        variants = {"ours": f"/admin/{path}", "default": f"/bench-default-admin/{path}"}
        counts, timings = {}, {label: [] for label in variants}
        for label, url in variants.items():
            with CaptureQueriesContext(connection) as queries:
                response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            counts[label] = len(queries)
        for _ in range(args.reps):
            for label, url in variants.items():
                started = time.perf_counter()
                client.get(url)
                timings[label].append((time.perf_counter() - started) * 1000)
        for label, values in timings.items():
            p50, p95 = statistics.median(values), percentile(values, 0.95)
            print(f"{name:<22} {label:<8} {counts[label]:>7} {p50:>9.1f} {p95:>9.1f}")
        ratio = statistics.median(timings["ours"]) / statistics.median(timings["default"])
        print(f"{name:<22} ours/default {ratio:.2f}")
