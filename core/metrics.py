"""The processes' own metrics (prometheus_client), read by ``manage.py weave_metrics``.

The server, the runner and the workers are separate processes: with ``PROMETHEUS_MULTIPROC_DIR`` set
for all of them (``make run`` sets it), each writes its samples there and the exporter adds them up.
"""

import contextvars
from contextlib import contextmanager

from prometheus_client import Counter, Histogram

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
HTTP_REQUESTS = Counter("weave_http_requests", "HTTP answers of the server, by status code.", ["status"])


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


class HttpMetricsMiddleware:
    """Counts every answer by its status code."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        HTTP_REQUESTS.labels(str(response.status_code)).inc()
        return response
