"""What the audit lists add to Django's changelist: who an actor is, and streamed exports."""

import csv
import json
from collections.abc import Iterable, Iterator

from django.db.models import Q

from history.models import Credential, Operator

EXPORT_BATCH = 2000
EXPORT_FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
# What a spreadsheet takes for the start of a formula in a cell (OWASP, CSV injection).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def actor_names(rows: Iterable) -> dict[tuple[str, str], str]:
    """``(namespace_id, actor_id)`` → who it is: the admin login and its groups, else the tokens' labels."""
    wanted = {(row.namespace_id, row.actor_id) for row in rows}
    if not wanted:
        return {}
    namespaces, actors = {ns for ns, _ in wanted}, {actor for _, actor in wanted}
    names: dict[tuple[str, str], str] = {}
    for credential in Credential.objects.filter(namespace_id__in=namespaces, actor_id__in=actors).order_by(
        "created_at"
    ):
        names.setdefault((credential.namespace_id, credential.actor_id), f"token {credential.label}")
    operators = Operator.objects.filter(namespace_id__in=namespaces, actor_id__in=actors).select_related("user")
    for operator in operators.prefetch_related("user__groups"):
        groups = ", ".join(sorted(group.name for group in operator.user.groups.all()))
        names[(operator.namespace_id, operator.actor_id)] = f"{operator.user.username} ({groups or 'no group'})"
    return names


def newest_first(queryset) -> Iterator:
    """Every row of ``queryset``, newest first, in keyset batches of (created_at, id): memory stays bounded by
    the batch however many rows match (MySQL clients read a whole result set at once)."""
    queryset = queryset.order_by("-created_at", "-id")
    last = None
    while True:
        page = queryset
        if last is not None:
            page = queryset.filter(Q(created_at__lt=last[0]) | Q(created_at=last[0], id__lt=last[1]))
        rows = list(page[:EXPORT_BATCH])
        yield from rows
        if len(rows) < EXPORT_BATCH:
            return
        last = (rows[-1].created_at, rows[-1].id)


class _Line:
    """A file-like that hands back what csv.writer writes, so each row streams as it is made."""

    def write(self, value: str) -> str:
        return value


def _csv_cell(value):
    """One CSV cell: JSON values as JSON text, and text a spreadsheet would run as a formula (a reason such as
    ``=HYPERLINK(…)``) led by ``'`` so it opens as text."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


def export_lines(rows: Iterable, columns: list[str], record, fmt: str) -> Iterator[str]:
    """CSV (a header, then one row each, cells by ``_csv_cell``) or JSON Lines of ``record(row)`` dicts, their
    text exact."""
    if fmt == "csv":
        writer = csv.writer(_Line())
        yield writer.writerow(columns)
        for row in rows:
            yield writer.writerow([_csv_cell(value) for value in record(row).values()])
        return
    for row in rows:
        yield json.dumps(record(row), sort_keys=False, ensure_ascii=False) + "\n"
