"""Readiness: the database answers within the bound (an unreachable one fails the check, never hangs the probe),
every migration is applied (remembered once true), and a Galera node is ready and synced."""

import socket
import threading

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.db.utils import ConnectionHandler

from core import readiness as readiness_module
from core.readiness import Check, readiness
from weave_site.settings import database_from_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def not_yet_migrated(monkeypatch):
    """A process that has not yet seen every migration applied."""
    monkeypatch.setattr(readiness_module, "_migrated", False)


def _probed(url: str, **options) -> list[Check]:
    """``readiness`` of a connection of its own, configured as the settings configure one from ``url`` (plus
    ``options``), made in a thread: a probe that hung fails here instead of hanging the test run."""
    config = database_from_url(url)
    config["OPTIONS"] |= options
    answers = []

    def probe() -> None:
        connection = ConnectionHandler({"default": config})["default"]
        try:
            answers.append(readiness(connection))
        finally:
            connection.close()

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the readiness probe hung"
    return answers[0]


def test_a_migrated_database_that_answers_is_ready(not_yet_migrated):
    checks = readiness(connection)
    assert [(c.name, c.ok) for c in checks][:2] == [("database", True), ("migrations", True)]
    assert all(check.ok for check in checks)


def test_an_unapplied_migration_is_named_and_once_all_are_applied_it_is_not_read_again(not_yet_migrated):
    recorded = MigrationRecorder.Migration.objects.filter(app="history").order_by("-id").first()
    MigrationRecorder.Migration.objects.filter(pk=recorded.pk).delete()
    migrations = readiness(connection)[1]
    assert migrations == Check("migrations", False, f"1 not applied, the first history.{recorded.name}")
    MigrationRecorder.Migration.objects.create(app="history", name=recorded.name)
    assert readiness(connection)[1].ok
    MigrationRecorder.Migration.objects.filter(app="history", name=recorded.name).delete()
    assert readiness(connection)[1].ok  # remembered: a migration is never undone under the running code


def test_a_database_on_a_closed_port_fails_the_database_check_alone(settings):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    [check] = _probed(f"mysql://root@127.0.0.1:{port}/weave")
    timeout = settings.WEAVE_READY_TIMEOUT_SECONDS
    # Refused: 2002 from MariaDB's client library, 2003 from MySQL's.
    assert (check.name, check.ok) == ("database", False)
    assert check.detail in {f"no answer within {timeout} s (OperationalError {code})" for code in (2002, 2003)}


def test_a_server_that_accepts_and_never_answers_fails_the_check_after_the_connect_timeout(settings):
    """The TCP connection is taken, the server's greeting never comes: connect_timeout ends the wait."""
    url = "mysql://root@127.0.0.1:{port}/weave"
    assert (
        database_from_url(url.format(port=3306))["OPTIONS"]["connect_timeout"] == settings.WEAVE_READY_TIMEOUT_SECONDS
    )
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        checks = _probed(url.format(port=silent.getsockname()[1]), connect_timeout=1)
    assert [(c.name, c.ok) for c in checks] == [("database", False)]
    assert checks[0].detail.endswith("(OperationalError 2013)")  # lost at the handshake


@pytest.mark.skipif(not connection.settings_dict.get("NODES"), reason="needs a Galera cluster URL (make test-cluster)")
@pytest.mark.django_db(transaction=True)
def test_a_galera_node_is_ready_only_while_it_is_synced():
    assert readiness(connection)[-1] == Check("cluster", True, "wsrep_ready ON, wsrep_local_state_comment Synced")
    with connection.cursor() as cursor:
        cursor.execute("SET GLOBAL wsrep_desync = ON")
    try:
        cluster = readiness(connection)[-1]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET GLOBAL wsrep_desync = OFF")
    assert (cluster.name, cluster.ok) == ("cluster", False) and "Desynced" in cluster.detail
