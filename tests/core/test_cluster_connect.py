"""A cluster URL names several nodes; a connection goes to the preferred one that is up and synced."""

import pytest
from django.db import connection

from core.db.base import DatabaseWrapper, pin_node
from history.locking import reads_from_any_commit
from weave_site.settings import database_from_url


def test_a_url_with_several_hosts_names_the_cluster_nodes_and_connects_to_the_first_by_default():
    config = database_from_url("mysql://root:pw@10.0.0.1:3311,10.0.0.2,10.0.0.3:3313/weave")
    assert config["NODES"] == [("10.0.0.1", 3311), ("10.0.0.2", 3306), ("10.0.0.3", 3313)]
    assert (config["HOST"], config["PORT"], config["USER"], config["PASSWORD"], config["NAME"]) == (
        "10.0.0.1",
        3311,
        "root",
        "pw",
        "weave",
    )
    assert "NODES" not in database_from_url("mysql://root@127.0.0.1:3306/weave")


@pytest.mark.skipif(not connection.settings_dict.get("NODES"), reason="needs a cluster URL (make test-cluster)")
def test_a_node_that_refuses_connections_is_skipped_and_a_pinned_thread_starts_at_its_node(db):
    nodes = connection.settings_dict["NODES"]
    closed = ("127.0.0.1", 1)  # nothing listens there
    wrapper = DatabaseWrapper({**connection.settings_dict, "NODES": [closed, *nodes]}, alias="cluster-test")
    try:
        with pin_node(0):
            wrapper.connect()
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT @@port, @@wsrep_sync_wait")
            assert cursor.fetchone() == (nodes[0][1], 1)
    finally:
        wrapper.close()
    wrapper = DatabaseWrapper(dict(connection.settings_dict), alias="cluster-test")
    try:
        with pin_node(2):
            wrapper.connect()
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT @@port")
            assert cursor.fetchone() == (nodes[2][1],)
    finally:
        wrapper.close()


@pytest.mark.skipif(not connection.settings_dict.get("NODES"), reason="needs a cluster URL (make test-cluster)")
def test_history_reads_do_not_wait_for_other_nodes_and_everything_else_does(db):
    def sync_wait() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@session.wsrep_sync_wait")
            return cursor.fetchone()[0]

    assert sync_wait() == 1
    with reads_from_any_commit():
        assert sync_wait() == 0
    assert sync_wait() == 1
