"""The schema itself: zero foreign keys, and a keyset index for every list the API pages."""

import pytest
from django.apps import apps
from django.db import connection

pytestmark = pytest.mark.django_db

LIST_INDEXES = {
    "history_activation": ["step_id", "sequence"],
    "history_pollround": ["activation_id", "round", "id"],
    "history_signal": ["namespace_id", "workflow_id", "accepted_at", "id"],
    "history_signaloperation": ["namespace_id", "workflow_id", "signal_id", "created_at", "id"],
    "history_workflowoperation": ["namespace_id", "workflow_id", "created_at", "id"],
    "history_workflowinstance": ["namespace_id", "state", "updated_at"],
    "history_task": ["queue_id", "state", "priority", "created_at"],
    "history_inboxrecord": ["instance_id", "state", "created_at"],
    "history_instanceevent": ["instance_id", "sequence"],
    # Not paged, but read most recent beat first (GET /v1/background, the console's home, the metrics).
    "history_backgroundprocess": ["beat_at", "id"],
}


def _foreign_keys() -> list[tuple[str, str]]:
    """Foreign keys on the engine's tables (Django's own auth/admin tables keep theirs)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT table_name, constraint_name FROM information_schema.referential_constraints"
                " WHERE constraint_schema = DATABASE() AND table_name LIKE 'history\\_%%'"
            )
            return list(cursor.fetchall())
        found = []
        for table in connection.introspection.table_names(cursor):
            if not table.startswith("history_"):
                continue
            cursor.execute(f'PRAGMA foreign_key_list("{table}")')
            found += [(table, row[2]) for row in cursor.fetchall()]
        return found


def test_the_engine_tables_hold_zero_foreign_keys():
    assert _foreign_keys() == []


@pytest.mark.parametrize("table", sorted(LIST_INDEXES))
def test_each_list_has_a_keyset_index(table):
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    leading = [c["columns"] for c in constraints.values() if c["index"] or c["unique"]]
    assert any(cols[: len(LIST_INDEXES[table])] == LIST_INDEXES[table] for cols in leading), leading


def test_the_signal_history_index_has_a_migration_of_its_own():
    from django.db.migrations.loader import MigrationLoader

    migration = MigrationLoader(connection).get_migration("history", "0002_workflow_signal_history")
    assert [type(op).__name__ for op in migration.operations] == ["AddIndex"]
    assert migration.operations[0].index.name == "workflow_signal_history"


def test_every_id_is_a_32_character_text_column():
    for model in apps.get_app_config("history").get_models():
        pk = model._meta.pk
        if pk.get_internal_type() == "CharField":
            assert pk.max_length == 32, model
        else:
            assert pk.is_relation, model
