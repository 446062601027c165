"""One digest of every row of every history table: equal digests mean nothing was written."""

import hashlib

import pytest
from django.apps import apps
from django.db import DatabaseError, connection

from core.errors import WeaveError

WRITES = ("INSERT", "UPDATE", "DELETE")


class FaultAt:
    """Counts the write statements and fails the ``n``-th one (0: never)."""

    def __init__(self, n: int) -> None:
        self.n, self.writes = n, []

    def __call__(self, execute, sql, params, many, context):
        if sql.lstrip().split(None, 1)[0].upper() in WRITES:
            self.writes.append(sql)
            if len(self.writes) == self.n:
                raise DatabaseError(f"injected fault at write {self.n}")
        return execute(sql, params, many, context)


def history_digest(*, excluding: tuple = ()) -> str:
    """Of every history table but the models ``excluding`` names (marks beside the engine's rows)."""
    digest = hashlib.sha256()
    models = [m for m in apps.get_app_config("history").get_models() if m not in excluding]
    with connection.cursor() as cursor:
        for model in sorted(models, key=lambda m: m._meta.db_table):
            table, pk = (connection.ops.quote_name(n) for n in (model._meta.db_table, model._meta.pk.column))
            cursor.execute(f"SELECT * FROM {table} ORDER BY {pk}")  # every column, as stored
            digest.update(table.encode())
            digest.update(repr(cursor.fetchall()).encode())
    return digest.hexdigest()


def assert_refused(call, code: str, *, field: str | None = None):
    """``call`` raises ``code`` (naming ``field`` when given) and leaves every history table as it was."""
    before = history_digest()
    with pytest.raises(WeaveError) as info:
        call()
    assert info.value.code == code, info.value.message
    if field is not None:
        assert info.value.field == field, info.value.message
    assert history_digest() == before
    return info.value
