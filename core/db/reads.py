"""The read mode of a session on a Galera cluster, owned by the backend that opens it (``core.db.base``).

A session reads causally (``wsrep_sync_wait=1``): before a read, its node applies every commit the cluster
has certified, so a check never decides on a row another node already changed. ``reads_from_any_commit``
turns that wait off for a block of reads whose contract already lets the answer move, and back on after.
On a single server (no ``NODES`` in the settings) there is no mode to switch and it changes nothing.
"""

import contextlib
from collections.abc import Iterator

_SYNC_WAIT = {True: "SET SESSION wsrep_sync_wait = 1", False: "SET SESSION wsrep_sync_wait = 0"}


def set_causal_reads(connection, causal: bool) -> None:
    """Set the read mode of ``connection``'s session (a Django connection or a DB-API one)."""
    with connection.cursor() as cursor:
        cursor.execute(_SYNC_WAIT[causal])


@contextlib.contextmanager
def reads_from_any_commit(connection) -> Iterator[None]:
    """The block's reads on ``connection`` need not wait for the latest commits of other nodes."""
    if not connection.settings_dict.get("NODES"):
        yield
        return
    set_causal_reads(connection, False)
    try:
        yield
    finally:
        set_causal_reads(connection, True)
