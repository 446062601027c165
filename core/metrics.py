"""The processes' own metrics (prometheus_client), read by ``manage.py weave_metrics``.

The server, the runner and the workers are separate processes: with ``PROMETHEUS_MULTIPROC_DIR`` set
for all of them (``make run`` sets it), each writes its samples there and the exporter adds them up.
"""

import contextvars
import time
from contextlib import contextmanager

from prometheus_client import Counter, Histogram

from core.logs import access_log
from core.request_id import request_id_of

RUNNER_PASS_SECONDS = Histogram("weave_runner_pass_seconds", "Duration of one runner pass, by pass.", ["pass_name"])
RUNNER_ITEMS = Counter("weave_runner_items", "Items runner passes handled, by pass.", ["pass_name"])
WORKER_CLAIMS = Counter(
    "weave_worker_claims", "Claim requests of workers, by queue and whether tasks came back.", ["queue", "result"]
)
WORKER_COMPLETIONS = Counter("weave_worker_completions", "Attempt reports of workers, by outcome.", ["outcome"])
RECOVERY_OPERATIONS = Counter(
    "weave_recovery_operations",
    "Recovery operations, by operation and outcome (or refusal code).",
    ["operation", "outcome"],
)
# Who repaired what, per definition version and step: the steps the engine started, and the recovery operations
# committed on them ($root: the instance as a whole). Repairs over runs is the human-repair rate of a step.
# Their series are bounded by the definitions' steps, never by instances.
STEP_RUNS = Counter(
    "weave_step_runs",
    "Steps the engine started (their first activation), by definition, version and step.",
    ["definition", "version", "step"],
)
STEP_REPAIRS = Counter(
    "weave_step_repairs",
    "Recovery operations committed, by definition, version, step ($root for the instance) and operation.",
    ["definition", "version", "step", "operation"],
)
HTTP_REQUESTS = Counter("weave_http_requests", "HTTP answers of the server, by status code.", ["status"])
HTTP_REQUEST_SECONDS = Histogram(
    "weave_http_request_duration_seconds",
    "Time the server took to answer, by URL pattern, method and status code.",
    ["route", "method", "status"],
)
# Labels take only these methods (any other counts as "other") and URL patterns, never a raw path: what a
# client sends cannot grow the number of series.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"


_uncounted = contextvars.ContextVar("weave_metrics_uncounted", default=False)


@contextmanager
def uncounted():
    """Work that is undone afterwards (a consequence preview) counts nothing."""
    token = _uncounted.set(True)
    try:
        yield
    finally:
        _uncounted.reset(token)


def count(counter: Counter, *labels: str) -> None:
    if not _uncounted.get():
        counter.labels(*labels).inc()


def route_of(request) -> str:
    """The URL pattern the request matched (e.g. ``v1/workflows/<str:id>``); ``unmatched`` when none did, or when
    the answer came before the URL was resolved (a redirect to HTTPS, a refused body)."""
    match = request.resolver_match
    return match.route if match is not None else UNMATCHED


class HttpMetricsMiddleware:
    """Counts and times every answer by route, method and status, and logs its access line."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        seconds = time.perf_counter() - started
        route, status = route_of(request), response.status_code
        method = request.method if request.method in HTTP_METHODS else "other"
        HTTP_REQUESTS.labels(str(status)).inc()
        HTTP_REQUEST_SECONDS.labels(route, method, str(status)).observe(seconds)
        access_log(method=method, route=route, status=status, seconds=seconds, request_id=request_id_of(request))
        return response
