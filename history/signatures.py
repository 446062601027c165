"""Recording a failure signature: one upsert in the transaction that puts an instance in review."""

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
)
# The first arrival inserts the row; every later one moves last_seen and counts. One statement either way.
_UPSERT = {
    "mysql": "ON DUPLICATE KEY UPDATE last_seen = VALUES(last_seen), `count` = `count` + 1",
    "sqlite": 'ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, "count" = "count" + 1',
}


def signature_record(
    *, namespace_id: str, definition_id: str, step_key: str, cause: str, reason: str, now: dt.datetime
) -> str:
    """Count one arrival of the signature of ``reason`` where it happened; its id."""
    pattern = error_pattern(reason)
    key = signature_id(
        namespace_id=namespace_id, definition_id=definition_id, step_key=step_key, cause=cause, pattern=pattern
    )
    field = FailureSignature._meta.get_field("first_seen")
    moment = field.get_db_prep_value(now, connection)
    values = [key, namespace_id, definition_id, step_key, cause, pattern, reason[:1024], moment, moment, 1]
    placeholders = ", ".join(["%s"] * len(values))
    table = connection.ops.quote_name(FailureSignature._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(column) for column in _COLUMNS)
    statement = f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) {_UPSERT[connection.vendor]}"
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
    return key
