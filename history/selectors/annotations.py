"""Notes, acknowledgement and assignment of instances: the notes list, and what the review queue shows per row."""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, QuerySet

from core.identity import Identity
from history.models import Note, ReviewAttention, WorkflowInstance
from history.selectors.access import instance_get_readable
from history.selectors.pagination import ListKind, Page, keyset_page

NOTES = ListKind("notes", Note, ("created_at", "id"))


@dataclass(frozen=True)
class NotePage:
    instance: WorkflowInstance
    # The acknowledgement and assignment of the instance's current review; None outside review or without one.
    attention: ReviewAttention | None
    page: Page[Note]


def note_list(*, identity: Identity, instance_id: str, after: tuple | None, limit: int) -> NotePage:
    """The instance's notes, newest first (created_at, id), with its current review's attention."""
    instance = instance_get_readable(identity=identity, instance_id=instance_id)
    page = keyset_page(instance_notes(instance), kind=NOTES, after=after, limit=limit)
    return NotePage(instance=instance, attention=review_attention_of([instance]).get(instance.id), page=page)


def instance_notes(instance: WorkflowInstance):
    """Every note of a visible instance (on the notes index: namespace, workflow, created_at, id)."""
    return Note.objects.filter(namespace_id=instance.namespace_id, workflow_id=instance.id)


def review_attention_of(
    instances: Iterable[WorkflowInstance], *, rows: QuerySet[ReviewAttention] | None = None
) -> dict[str, ReviewAttention]:
    """Instance id → the attention of its current review, for instances in review: one query for the list
    (of ``rows``, when the caller annotates them).

    A row left by an earlier review (its ``review_since`` is not the instance's) is no attention at all.
    """
    since = {i.id: i.review_since for i in instances if i.review_since is not None}
    if not since:
        return {}
    rows = (ReviewAttention.objects.all() if rows is None else rows).filter(instance_id__in=list(since))
    return {row.instance_id: row for row in rows if row.review_since == since[row.instance_id]}


def note_counts(instances: Iterable[WorkflowInstance]) -> dict[str, int]:
    """Instance id → how many notes it has (absent: none), in one query."""
    instances = list(instances)
    if not instances:
        return {}
    rows = (
        Note.objects.filter(
            namespace_id__in={i.namespace_id for i in instances}, workflow_id__in=[i.id for i in instances]
        )
        .values("workflow_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {row["workflow_id"]: row["n"] for row in rows}
