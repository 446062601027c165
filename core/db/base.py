"""Django's MySQL/MariaDB backend, with a transaction costing two control round trips instead of three, and
connections to a Galera cluster that go to a node that is up and synced.

Django opens an ``atomic`` block by turning autocommit off (``SET autocommit=0``) and turns it
back on after the COMMIT (``SET autocommit=1``). Here the block opens with ``START TRANSACTION``
and the session stays in autocommit mode: after the COMMIT or ROLLBACK there is nothing to turn
back on (mysqlclient sends no ``SET autocommit=1`` when the server already reports it on). This is
the hook Django's SQLite backend uses for its BEGIN; it applies to ``atomic`` only: a manual
``set_autocommit(False)`` still turns autocommit off.

A web process keeps its connection between requests and checks it before a request reuses it
(``WEAVE_DB_CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``): on a cluster that check is also the node's readiness.

A cluster URL names several nodes (``mysql://user@h1:p1,h2:p2,h3:p3/db``, ``NODES`` in the settings). A new
connection tries them in order from the preferred one — ``WEAVE_DATABASE_NODE`` for a process, ``pin_node``
for a thread — and skips a node that refuses the connection or is not ready (``wsrep_ready`` OFF: not part
of the primary component, or not yet synced). Its reads wait for every commit the cluster has certified
(``wsrep_sync_wait=1``): a check never decides on a row another node already changed. That read mode is
switched only through ``core.db.reads``, which the history lists use to read without the wait.
"""

import contextlib
import os
import threading
from collections.abc import Iterator

from django.db.backends.mysql import base

from core.db.reads import set_causal_reads

_pinned = threading.local()
# The client errors of a node that cannot be reached or went away: try the next node. Any other error (an
# unknown database, a refused login) is the same on every node and is raised as it is.
_UNREACHABLE = {2002, 2003, 2005, 2006, 2013}


@contextlib.contextmanager
def pin_node(index: int) -> Iterator[None]:
    """This thread's new connections go to cluster node ``index`` (modulo their number) first."""
    before = getattr(_pinned, "index", None)
    _pinned.index = index
    try:
        yield
    finally:
        _pinned.index = before


def _preferred(count: int) -> int:
    index = getattr(_pinned, "index", None)
    if index is None:
        index = int(os.environ.get("WEAVE_DATABASE_NODE", "0"))
    return index % count


def _ready(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SHOW STATUS LIKE 'wsrep_ready'")
        row = cursor.fetchone()
    return row is not None and row[1] == "ON"


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        nodes = self.settings_dict.get("NODES")
        if not nodes:
            return super().get_new_connection(conn_params)
        start = _preferred(len(nodes))
        refused = []
        for host, port in nodes[start:] + nodes[:start]:
            try:
                connection = super().get_new_connection(conn_params | {"host": host, "port": port})
            except base.Database.OperationalError as error:
                if error.args[0] not in _UNREACHABLE:
                    raise
                refused.append(f"{host}:{port} ({error.args[-1]})")
                continue
            if _ready(connection):
                set_causal_reads(connection, True)
                return connection
            connection.close()
            refused.append(f"{host}:{port} (not ready)")
        raise base.Database.OperationalError(2003, "no cluster node is up and synced: " + ", ".join(refused))

    def is_usable(self) -> bool:
        """Up, and on a cluster still on a node that is ready: a kept connection whose node left the primary
        component answers a ping but refuses every query, and is replaced instead (``CONN_HEALTH_CHECKS``)."""
        if not super().is_usable():
            return False
        if not self.settings_dict.get("NODES"):
            return True
        try:
            return _ready(self.connection)
        except base.Database.Error:
            return False

    def _start_transaction_under_autocommit(self) -> None:
        with self.cursor() as cursor:
            cursor.execute("START TRANSACTION")
