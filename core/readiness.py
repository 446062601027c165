"""Whether this process may take requests: its database answers within ``WEAVE_READY_TIMEOUT_SECONDS``, every
migration is applied, and a Galera node is ready and synced. Asked by GET /readyz, never by the background.

The bound: on MariaDB the question is one statement under ``max_statement_time``, and a new connection
gives up after ``connect_timeout`` (the same setting, ``weave_site/settings.py``); on a cluster URL that is
per node tried, the nodes that refuse at once costing nothing.
"""

import logging
from dataclasses import dataclass

from django import db
from django.conf import settings
from django.db.migrations.executor import MigrationExecutor

log = logging.getLogger("weave.health")

# What a MariaDB node says of itself: whether it is a Galera node, and if so whether it is ready and synced.
_NODE_STATE = (
    "SET STATEMENT max_statement_time={timeout} FOR SELECT @@wsrep_on,"
    " (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_READY'),"
    " (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT')"
)

# Migrations are applied before the code that needs them starts, and never undone under it: once this
# process has seen them all applied, later probes need not read the migration graph again.
_migrated = False


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def readiness(connection) -> list[Check]:
    """The checks, in order: ``database``, then ``migrations`` and, on a Galera node, ``cluster``; a database that
    does not answer is the only check (nothing else can be asked). A database error is a failed check, never raised.
    """
    timeout = settings.WEAVE_READY_TIMEOUT_SECONDS
    try:
        node = _node_state(connection, timeout)
    except db.Error as error:
        return [_failed("database", f"no answer within {timeout} s", error)]
    checks = [Check("database", True, "answered")]
    try:
        checks.append(_migrations(connection))
    except db.Error as error:
        checks.append(_failed("migrations", "the applied migrations could not be read", error))
    wsrep_on, ready, state = node
    if wsrep_on:
        synced = ready == "ON" and state == "Synced"
        checks.append(Check("cluster", synced, f"wsrep_ready {ready}, wsrep_local_state_comment {state}"))
    return checks


def _node_state(connection, timeout: int) -> tuple[bool, str | None, str | None]:
    with connection.cursor() as cursor:
        if connection.vendor == "mysql" and connection.mysql_is_mariadb:
            cursor.execute(_NODE_STATE.format(timeout=int(timeout)))
            wsrep_on, ready, state = cursor.fetchone()
            return bool(wsrep_on), ready, state
        cursor.execute("SELECT 1")
        cursor.fetchone()
        return False, None, None


def _migrations(connection) -> Check:
    global _migrated
    if not _migrated:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            first = plan[0][0]
            return Check("migrations", False, f"{len(plan)} not applied, the first {first.app_label}.{first.name}")
        _migrated = True
    return Check("migrations", True, "every migration applied")


def _failed(name: str, what: str, error: db.Error) -> Check:
    """A failed check naming the error's class and code; the message (hosts, ports) goes to the log only, since
    the probe answers anyone."""
    log.warning("readiness: %s: %s (%s)", name, what, error)
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    return Check(name, False, f"{what} ({type(error).__name__}{f' {code}' if code is not None else ''})")
