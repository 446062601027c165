"""The console's home: the instances in review, oldest first, with the one next operation each.

The counts are the review summary of the instance query (one index-only count per cause and per
definition); the rows are those past their definition's review SLA (``review_sla_seconds``), the most
overdue first, then the oldest reviews. Each row's next operation is the first one its eligibility
(the same checks as the commit) says is possible.
"""

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count, Max, Q, Sum
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from console.attention import queue_attention
from console.links import decide_link, instance_label, next_operation
from core import clock
from core.identity import identity_of_user
from history.models import InstanceState, ReviewCause, WorkflowDefinition, WorkflowInstance
from history.selectors.access import visible_rows
from history.selectors.instance_list import review_summary
from history.selectors.signatures import signature_summary
from recovery.eligibility import Judged, eligibilities

ROWS = 25
# The query parameters the queue reads, named as the instance query's (GET /v1/workflows) are.
FILTERS = ("review_cause", "definition", "signature", "q")


@dataclass
class QueueRow:
    instance: WorkflowInstance
    age: str
    next_operation: dict | None
    # The decision form, for those who may recover.
    decide_url: str = ""
    # How long past its definition's review SLA ("" within it, or without one).
    over_sla: str = ""
    # Who acknowledged the review and who is on it (login names), and how many notes the instance has.
    acknowledged_by: str = ""
    assignee: str = ""
    notes: int = 0

    @property
    def label(self) -> SafeString:
        return instance_label(self.instance)


def review_queue(request) -> dict | None:
    """The queue's counts, filters and oldest rows for this user, or None for a user without an identity."""
    identity = _queue_identity(request)
    if identity is None:
        return None
    # Read before the rows: a change made while they are read shows as a newer version, never as none.
    version = queue_version(identity)
    chosen = {name: request.GET.get(name, "").strip() for name in FILTERS}
    rows = visible_rows(WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW), identity)
    error = None
    if chosen["review_cause"]:
        if chosen["review_cause"] not in ReviewCause.values:
            error = f"review_cause: {chosen['review_cause']!r} is not a review cause"
            rows = rows.none()
        else:
            rows = rows.filter(review_cause=chosen["review_cause"])
    if chosen["definition"]:
        rows = rows.filter(definition__name=chosen["definition"])
    if chosen["signature"]:
        rows = rows.filter(failure_signature_id=chosen["signature"])
    if chosen["q"]:
        # An id prefix or a business key prefix, as the changelist's search reads it.
        rows = rows.filter(Q(id__istartswith=chosen["q"]) | Q(business_key__istartswith=chosen["q"]))
    breached, over_sla = _past_sla(rows, identity)
    oldest = list(_oldest(rows.exclude(id__in=[i.id for i in breached]))[: ROWS + 1])
    oldest = (breached + oldest)[: ROWS + 1]
    may_recover = request.user.has_perm("history.recover_workflowinstance")
    summary = review_summary(identity=identity)
    judged = eligibilities(identity=identity, instances=oldest[:ROWS]) if may_recover else {}
    rows = [_row(instance, judged.get(instance.id)) for instance in oldest[:ROWS]]
    queue_attention(rows, identity.namespace_id)
    return {
        "total": summary.total,
        "over_sla": over_sla,
        "causes": [
            (cause, ReviewCause(cause).label if cause in ReviewCause.values else "", n) for cause, n in summary.causes
        ],
        "definitions": summary.definitions,
        "signatures": signature_summary(identity=identity),
        "truncated": summary.definitions_truncated,
        "chosen": chosen,
        "error": error,
        "filtered": any(chosen.values()),
        "rows": rows,
        "more": len(oldest) > ROWS,
        "rows_cap": ROWS,
        "version": version,
        "changelist": reverse("admin:history_workflowinstance_changelist")
        + "?"
        + urlencode({"state__exact": "NEEDS_REVIEW"}),
    }


def _queue_identity(request):
    """Who the queue is read as: the user's identity, when the user may see instances."""
    identity = identity_of_user(request.user)
    if identity is None or not request.user.has_perm("history.view_workflowinstance"):
        return None
    return identity


def queue_version(identity) -> str:
    """What the home page compares to know its queue changed: how many instances in review it may see, their
    revisions summed (every change bumps one) and the latest change, and the minute (the ages it shows)."""
    rows = visible_rows(WorkflowInstance.objects.filter(state=InstanceState.NEEDS_REVIEW), identity)
    seen = rows.aggregate(count=Count("id"), revisions=Sum("revision"), latest=Max("updated_at"))
    latest = seen["latest"].timestamp() if seen["latest"] else 0
    return f"{seen['count']}.{seen['revisions'] or 0}.{latest}.{int(clock.now().timestamp() // 60)}"


def queue_status(request) -> dict:
    """What the home page polls to refresh its queue: small, no page; nothing to follow without a queue."""
    identity = _queue_identity(request)
    if identity is None:
        return {"version": "", "moving": False}
    return {"version": queue_version(identity), "moving": True}


def _past_sla(rows, identity) -> tuple[list[WorkflowInstance], int]:
    """The queue's instances waiting longer than their definition's review_sla_seconds, the most overdue first
    (at most a page of them), and how many there are: one range read per definition that declares an SLA."""
    now = clock.now()
    slas = {
        definition.id: definition.spec["review_sla_seconds"]
        for definition in visible_rows(WorkflowDefinition.objects.filter(spec__has_key="review_sla_seconds"), identity)
    }
    breached, total = [], 0
    for definition_id, sla in slas.items():
        late = rows.filter(definition_id=definition_id, review_since__lt=now - dt.timedelta(seconds=sla))
        total += late.count()
        breached += _oldest(late)[:ROWS]
    breached.sort(key=lambda i: (-_overdue(i, now), i.id))
    return breached[:ROWS], total


def _oldest(rows):
    """The instances in review, the longest waiting first, a range of the (namespace, state, review_since, id) index.

    Joined to their definitions, MariaDB drove the read from the few definitions and sorted every instance of
    each (18 s at 1M). In review, a time is always recorded (weave_check reports an instance that lacks one).
    """
    return rows.filter(review_since__isnull=False).order_by("review_since", "id").prefetch_related("definition")


def _overdue(instance: WorkflowInstance, now) -> dt.timedelta:
    """How long past its definition's review SLA the instance has waited (zero within it or without one)."""
    sla = instance.definition.spec.get("review_sla_seconds")
    if not sla or instance.review_since is None:
        return dt.timedelta(0)
    return max(now - instance.review_since - dt.timedelta(seconds=sla), dt.timedelta(0))


def _row(instance: WorkflowInstance, judged: Judged | None) -> QueueRow:
    """The instance's row; with its judged eligibility (for those who may recover), its next operation."""
    now = clock.now()
    overdue = _overdue(instance, now)
    return QueueRow(
        instance=instance,
        age=age(now - instance.review_since) if instance.review_since else "",
        next_operation=next_operation(instance, judged.eligibility, judged.steps, judged.review_tasks)
        if judged
        else None,
        decide_url=decide_link(instance) if judged else "",
        over_sla=age(overdue) if overdue else "",
    )


def age(elapsed) -> str:
    """Whole days, hours and minutes, the two largest that are not zero ("2 d 3 h", "5 h 12 min", "4 min")."""
    minutes = int(elapsed.total_seconds() // 60)
    parts = [(minutes // 1440, "d"), (minutes // 60 % 24, "h"), (minutes % 60, "min")]
    shown = [f"{n} {unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "< 1 min"
