"""Recording a failure signature: one upsert in the transaction that puts an instance in review (the instance's
own row, written anyway, keeps its root)."""

import datetime as dt

from django.db import connection

from core.signatures import error_pattern, signature_id
from history.models import FailureSignature

_COLUMNS = (
    "id",
    "namespace_id",
    "definition_id",
    "step_key",
    "review_cause",
    "pattern",
    "sample",
    "first_seen",
    "last_seen",
    "count",
    "knock_on",
)
# The first arrival inserts the row; every later one moves last_seen and counts. One statement either way.
_UPSERT = {
    "mysql": (
        "ON DUPLICATE KEY UPDATE last_seen = VALUES(last_seen), `count` = `count` + 1, "
        "knock_on = knock_on + VALUES(knock_on)"
    ),
    "sqlite": (
        'ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, "count" = "count" + 1, '
        '"knock_on" = "knock_on" + excluded."knock_on"'
    ),
}


def signature_record(
    *,
    namespace_id: str,
    definition_id: str,
    step_key: str,
    cause: str,
    reason: str,
    root: str | None,
    now: dt.datetime,
) -> str:
    """Count one arrival of the signature of ``reason`` where it happened, as a knock-on when the instance's
    ``root`` (the first signature it entered review with, if any) is another; its id."""
    pattern = error_pattern(reason)
    key = signature_id(
        namespace_id=namespace_id, definition_id=definition_id, step_key=step_key, cause=cause, pattern=pattern
    )
    field = FailureSignature._meta.get_field("first_seen")
    moment = field.get_db_prep_value(now, connection)
    knock_on = int(root is not None and root != key)
    values = [key, namespace_id, definition_id, step_key, cause, pattern, reason[:1024], moment, moment, 1, knock_on]
    placeholders = ", ".join(["%s"] * len(values))
    table = connection.ops.quote_name(FailureSignature._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(column) for column in _COLUMNS)
    statement = f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) {_UPSERT[connection.vendor]}"
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
    return key
