"""On MariaDB an atomic block opens with START TRANSACTION and the session stays in autocommit mode.

Two control round trips per transaction instead of three, with Django's transaction semantics
unchanged: a block commits or rolls back whole, and a manual ``set_autocommit(False)`` still
turns autocommit off until it is turned back on.
"""

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from history.models import Namespace
from tests.factories import NamespaceFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="the MariaDB backend's transaction control"),
]


def _server_autocommit() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@autocommit")
        return cursor.fetchone()[0]


def test_an_atomic_block_opens_with_start_transaction_and_commits_without_an_autocommit_switch():
    connection.ensure_connection()
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        NamespaceFactory(name="committed")
        assert connection.in_atomic_block and _server_autocommit() == 1
    statements = [q["sql"] for q in captured.captured_queries]
    assert statements[0] == "START TRANSACTION" and statements[-1] == "COMMIT"
    assert not any("autocommit" in sql.lower() for sql in statements if "@@autocommit" not in sql)
    assert connection.get_autocommit() and connection.connection.get_autocommit()
    assert Namespace.objects.filter(name="committed").exists()


def test_an_atomic_block_that_fails_leaves_nothing_and_the_next_one_commits():
    with pytest.raises(DatabaseError), transaction.atomic():
        NamespaceFactory(name="rolled-back")
        raise DatabaseError("the block fails")
    with transaction.atomic():
        NamespaceFactory(name="next")
    assert list(Namespace.objects.values_list("name", flat=True)) == ["next"]
    assert _server_autocommit() == 1


def test_a_manual_transaction_still_turns_autocommit_off_until_turned_back_on():
    transaction.set_autocommit(False)
    try:
        assert _server_autocommit() == 0
        NamespaceFactory(name="kept")
        transaction.commit()
        NamespaceFactory(name="dropped")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert list(Namespace.objects.values_list("name", flat=True)) == ["kept"]
    assert _server_autocommit() == 1
