"""What ``manage.py weave_metrics`` exposes: the processes' counters and the database's own gauges.

The gauges are read at each scrape, each from an index: instances in review by namespace, definition
and cause, the oldest review per namespace, and the inbox records waiting or set aside.
"""

import os

from django.db.models import Count, Min
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from core import clock
from history.models import InboxRecord, InboxState, InstanceState, Namespace, WorkflowDefinition, WorkflowInstance


class DatabaseCollector:
    """Gauges read from the tables at scrape time (every namespace: the exporter is an operator's tool)."""

    def collect(self):
        in_review = WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW)
        namespaces = dict(Namespace.objects.values_list("id", "name"))
        rows = list(
            in_review.values_list("namespace_id", "definition_id", "review_cause").annotate(n=Count("*")).order_by()
        )
        definitions = dict(
            WorkflowDefinition.objects.filter(id__in={d for _, d, _, _ in rows}).values_list("id", "name")
        )
        review = GaugeMetricFamily(
            "weave_instances_in_review", "Instances in NEEDS_REVIEW.", labels=["namespace", "definition", "cause"]
        )
        for namespace_id, definition_id, cause, n in rows:
            review.add_metric(
                [namespaces.get(namespace_id, namespace_id), definitions.get(definition_id, ""), cause], n
            )
        yield review

        oldest = GaugeMetricFamily(
            "weave_oldest_review_age_seconds", "Age of the oldest review, per namespace.", labels=["namespace"]
        )
        now = clock.now()
        for namespace_id, since in in_review.values_list("namespace_id").annotate(since=Min("review_since")).order_by():
            if since is not None:
                oldest.add_metric([namespaces.get(namespace_id, namespace_id)], (now - since).total_seconds())
        yield oldest

        inbox = GaugeMetricFamily(
            "weave_inbox_records", "Inbox records waiting for the runner or set aside.", labels=["state"]
        )
        for state in (InboxState.PENDING, InboxState.QUARANTINED):
            inbox.add_metric([state.value], InboxRecord.objects.filter(state=state).count())
        yield inbox


class _ThisProcess:
    """This process's own samples, when the processes share no directory."""

    def collect(self):
        yield from REGISTRY.collect()


def metrics_registry() -> CollectorRegistry:
    """The registry to expose: every process's samples when they share PROMETHEUS_MULTIPROC_DIR (else this
    process's own), and the database's gauges."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector())
    return registry


def metrics_text(registry: CollectorRegistry | None = None) -> bytes:
    return generate_latest(registry or metrics_registry())
