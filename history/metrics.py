"""What ``manage.py weave_metrics`` exposes: the processes' counters and the database's own gauges.

The gauges are read at each scrape, each from an index: instances in review by namespace, definition
and cause, the oldest review per namespace, the reviews past their definition's SLA, the inbox records
waiting or set aside, the recovery proposals waiting for a second person per namespace, the instances the
watchdog marked stalled per reason, the repair campaigns per state and the items of those still open per
outcome, the repairs by the verdict on them, and the age of each running background process's last beat.
"""

import datetime as dt
import os

from django.db.models import Count, Min
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from core import clock
from history.models import (
    CAMPAIGN_OPEN,
    Campaign,
    CampaignItem,
    InboxRecord,
    InboxState,
    InstanceState,
    Namespace,
    Proposal,
    ProposalState,
    RepairCheck,
    Stall,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.selectors.background import background_status


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

        past_sla = GaugeMetricFamily(
            "weave_reviews_past_sla",
            "Instances in review longer than their definition's review_sla_seconds.",
            labels=["namespace", "definition"],
        )
        with_sla = WorkflowDefinition.objects.filter(spec__has_key="review_sla_seconds")
        for definition in with_sla.only("id", "namespace_id", "name", "spec"):
            since = now - dt.timedelta(seconds=definition.spec["review_sla_seconds"])
            late = in_review.filter(definition_id=definition.id, review_since__lt=since).count()
            past_sla.add_metric([namespaces.get(definition.namespace_id, ""), definition.name], late)
        yield past_sla

        inbox = GaugeMetricFamily(
            "weave_inbox_records", "Inbox records waiting for the runner or set aside.", labels=["state"]
        )
        for state in (InboxState.PENDING, InboxState.QUARANTINED):
            inbox.add_metric([state.value], InboxRecord.objects.filter(state=state).count())
        yield inbox

        proposals = GaugeMetricFamily(
            "weave_proposals_pending",
            "Recovery proposals waiting for a second person's approval (unexpired).",
            labels=["namespace"],
        )
        pending = Proposal.objects.filter(state=ProposalState.PENDING, expires_at__gt=now)
        for namespace_id, n in pending.values_list("namespace_id").annotate(n=Count("*")).order_by():
            proposals.add_metric([namespaces.get(namespace_id, namespace_id)], n)
        yield proposals

        stalled = GaugeMetricFamily(
            "weave_stalled_instances",
            "Instances the watchdog marked stuck outside review, per reason.",
            labels=["namespace", "reason"],
        )
        for namespace_id, reason, n in Stall.objects.values_list("namespace_id", "reason").annotate(n=Count("*")):
            stalled.add_metric([namespaces.get(namespace_id, namespace_id), reason], n)
        yield stalled

        campaigns = GaugeMetricFamily("weave_campaigns", "Repair campaigns, per state.", labels=["namespace", "state"])
        for namespace_id, state, n in Campaign.objects.values_list("namespace_id", "state").annotate(n=Count("*")):
            campaigns.add_metric([namespaces.get(namespace_id, namespace_id), state], n)
        yield campaigns

        repairs = GaugeMetricFamily(
            "weave_repairs",
            "Repairs (each Continue that let an instance run on) by the verdict on them, per definition and step.",
            labels=["namespace", "definition", "step", "verdict"],
        )
        judged = list(
            RepairCheck.objects.values_list("namespace_id", "definition_id", "step_key", "verdict")
            .annotate(n=Count("*"))
            .order_by()
        )
        names = dict(WorkflowDefinition.objects.filter(id__in={row[1] for row in judged}).values_list("id", "name"))
        for namespace_id, definition_id, step_key, verdict, n in judged:
            repairs.add_metric(
                [namespaces.get(namespace_id, namespace_id), names.get(definition_id, ""), step_key, verdict], n
            )
        yield repairs

        items = GaugeMetricFamily(
            "weave_campaign_items",
            "Items of the repair campaigns still open (not done or cancelled), per campaign and outcome.",
            labels=["namespace", "campaign", "outcome"],
        )
        open_items = CampaignItem.objects.filter(campaign__state__in=CAMPAIGN_OPEN)
        for namespace_id, campaign_id, outcome, n in (
            open_items.values_list("campaign__namespace_id", "campaign_id", "outcome").annotate(n=Count("*")).order_by()
        ):
            items.add_metric([namespaces.get(namespace_id, namespace_id), campaign_id, outcome], n)
        yield items

        beats = GaugeMetricFamily(
            "weave_background_heartbeat_age_seconds",
            "Seconds since each running (not stopped) runner or worker process last finished a pass.",
            labels=["kind", "queue", "host", "pid"],
        )
        for status in background_status(identity=None).processes:
            process = status.process
            if process.stopped_at is None:
                beats.add_metric(
                    [process.kind, process.queue, process.host, str(process.pid)], status.age.total_seconds()
                )
        yield beats


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
