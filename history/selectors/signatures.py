"""Causes as the queue and the API read them: the failure signatures behind the instances in review, and the
instances the watchdog marked stalled outside review."""

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count
from django.db.models.functions import TruncHour

from core import clock
from core.identity import Identity
from history.models import (
    FailureSignature,
    InstanceState,
    Stall,
    StallReason,
    WorkflowDefinition,
    WorkflowInstance,
)
from history.selectors.access import visible_rows
from history.selectors.pagination import ListKind, Page, keyset_page

SIGNATURES = ListKind("signatures", FailureSignature, ("last_seen", "id"))
# The queue lists the signatures with the most instances in review, and their arrivals hour by hour.
SHOWN = 10
HOURS = 24


@dataclass(frozen=True)
class SignatureCount:
    signature: FailureSignature
    definition: WorkflowDefinition
    in_review: int
    # Instances of it that entered review in each of the last HOURS hours, oldest first (still in review).
    arrivals: tuple[int, ...]


def signature_summary(*, identity: Identity, limit: int = SHOWN) -> list[SignatureCount]:
    """The signatures with the most visible instances in review, most first, with their hourly arrivals."""
    in_review = visible_rows(WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW), identity)
    busiest = list(
        in_review.exclude(failure_signature=None)
        .values_list("failure_signature_id")
        .annotate(n=Count("*"))
        .order_by("-n", "failure_signature_id")[:limit]
    )
    signatures = FailureSignature.objects.in_bulk([key for key, _ in busiest])
    definitions = WorkflowDefinition.objects.in_bulk({s.definition_id for s in signatures.values()})
    now = clock.now().replace(minute=0, second=0, microsecond=0)
    since = now - dt.timedelta(hours=HOURS - 1)
    hourly = (
        in_review.filter(failure_signature_id__in=list(signatures), review_since__gte=since)
        .annotate(hour=TruncHour("review_since", tzinfo=dt.UTC))
        .values_list("failure_signature_id", "hour")
        .annotate(n=Count("*"))
        .order_by()
    )
    arrivals: dict[str, list[int]] = {key: [0] * HOURS for key in signatures}
    for key, hour, n in hourly:
        # A review_since ahead of this clock (another host's) counts as this hour's.
        hours_ago = max(int((now - hour).total_seconds() // 3600), 0)
        arrivals[key][HOURS - 1 - hours_ago] += n
    return [
        SignatureCount(
            signature=signatures[key],
            definition=definitions[signatures[key].definition_id],
            in_review=n,
            arrivals=tuple(arrivals[key]),
        )
        for key, n in busiest
        if key in signatures
    ]


@dataclass(frozen=True)
class SignaturePage:
    page: Page[FailureSignature]
    definitions: dict[str, WorkflowDefinition]
    # Per signature of the page, its visible instances in review now (absent: none).
    in_review: dict[str, int]


def signature_list(*, identity: Identity, after: tuple | None, limit: int) -> SignaturePage:
    """The namespace's signatures of the definitions the identity may see, the latest arrival first."""
    rows = visible_rows(FailureSignature.objects.all(), identity)
    page = keyset_page(rows, kind=SIGNATURES, after=after, limit=limit)
    keys = [signature.id for signature in page.items]
    in_review = visible_rows(WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW), identity)
    counts = in_review.filter(failure_signature_id__in=keys).values_list("failure_signature_id").annotate(n=Count("*"))
    definitions = WorkflowDefinition.objects.in_bulk({signature.definition_id for signature in page.items})
    return SignaturePage(page=page, definitions=definitions, in_review=dict(counts.order_by()))


@dataclass(frozen=True)
class StallSummary:
    total: int
    reasons: list[tuple[str, str, int]]  # (reason, its meaning, count), the largest first
    oldest: list[Stall]  # with their instances and definitions, the longest stalled first


def stall_summary(*, identity: Identity, limit: int = SHOWN) -> StallSummary:
    """The visible instances the watchdog marked stalled: counted per reason, and the longest stalled."""
    marks = visible_rows(Stall.objects.all(), identity)
    reasons = dict(StallReason.choices)
    counts = sorted(marks.values_list("reason").annotate(n=Count("*")).order_by(), key=lambda r: (-r[1], r[0]))
    oldest = list(marks.select_related("instance__definition").order_by("since", "id")[:limit])
    return StallSummary(
        total=sum(n for _, n in counts),
        reasons=[(reason, reasons.get(reason, ""), n) for reason, n in counts],
        oldest=oldest,
    )
