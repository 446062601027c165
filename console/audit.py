"""What the audit lists add to Django's changelist: who an actor is, and streamed exports."""

import csv
import json
from collections.abc import Iterable, Iterator

from django.core.exceptions import EmptyResultSet
from django.db import connection
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


def newest_first(queryset, *, related: Iterable[str] = ()) -> Iterator:
    """Every row of ``queryset``, newest first, in keyset batches of (created_at, id), with the ``related`` rows
    they name: memory stays bounded by the batch however many rows match (MySQL clients read a whole result set
    at once)."""
    queryset = queryset.order_by("-created_at", "-id")
    last = None
    while True:
        page = queryset
        if last is not None:
            page = queryset.filter(Q(created_at__lte=last[0]) & (Q(created_at__lt=last[0]) | Q(id__lt=last[1])))
        rows = _batch(page, related)
        yield from rows
        if len(rows) < EXPORT_BATCH:
            return
        last = (rows[-1].created_at, rows[-1].id)


def _batch(page, related: Iterable[str]) -> list:
    """The first EXPORT_BATCH rows of ``page``. On MariaDB their ids are read through the table's (namespace,
    created_at, id) index by name first: left to choose, it reads that index from the namespace's newest entry
    (a ref, not the range the key bounds), so each batch walked every row the batches before it had read."""
    index = next((i.name for i in page.model._meta.indexes if i.fields == ["namespace", "created_at", "id"]), None)
    if connection.vendor != "mysql" or index is None:
        return list(page.prefetch_related(*related)[:EXPORT_BATCH])
    try:
        sql, params = page.values_list("pk", flat=True)[:EXPORT_BATCH].query.sql_with_params()
    except EmptyResultSet:  # a filter that can match nothing (no queue of the list's is the reader's)
        return []
    table = connection.ops.quote_name(page.model._meta.db_table)
    sql = sql.replace(f"FROM {table}", f"FROM {table} FORCE INDEX ({connection.ops.quote_name(index)})", 1)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    # Then the rows by primary key alone (with the list's filters, MariaDB may take the same ref again).
    rows = page.model.objects.prefetch_related(*related).in_bulk(ids)
    return [rows[pk] for pk in ids if pk in rows]


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
