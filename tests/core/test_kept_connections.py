"""A web process keeps its database connection between requests, and drops it when it no longer serves."""

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import OperationalError, connection
from django.test.client import RequestFactory

from core.db import base as backend
from core.db.base import DatabaseWrapper


def _served(path: str) -> int:
    """``path`` through the WSGI handler as a server calls it: the request's signals close or keep connections."""
    answered = []
    response = WSGIHandler()(RequestFactory()._base_environ(PATH_INFO=path), lambda status, _: answered.append(status))
    response.close()  # as the server does once it has sent the answer: the request is finished
    return int(answered[0].split()[0])


@pytest.mark.django_db(transaction=True)
def test_one_connection_serves_request_after_request_and_with_no_age_each_request_opens_its_own(monkeypatch):
    assert connection.settings_dict["CONN_MAX_AGE"] == 60
    assert _served("/readyz") == 200
    kept = connection.connection
    assert _served("/readyz") == 200 and connection.connection is kept
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        return  # Django never closes an in-memory database: it would be gone
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    connection.close()
    assert _served("/readyz") == 200
    assert connection.connection is None  # closed when the request finished


@pytest.mark.skipif(connection.vendor != "mysql", reason="a MariaDB connection")
def test_a_kept_connection_whose_cluster_node_is_no_longer_ready_is_dropped_before_it_is_reused(db, monkeypatch):
    ready = [True]
    monkeypatch.setattr(backend, "_ready", lambda raw: ready[0])
    node = (connection.settings_dict["HOST"] or "127.0.0.1", int(connection.settings_dict["PORT"] or 3306))
    wrapper = DatabaseWrapper({**connection.settings_dict, "NODES": [node]}, alias="kept")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
        kept = wrapper.connection
        wrapper.close_if_unusable_or_obsolete()  # as each request starts
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert wrapper.connection is kept
        ready[0] = False  # the node left the primary component: it still answers a ping
        wrapper.close_if_unusable_or_obsolete()
        with pytest.raises(OperationalError, match="no cluster node is up and synced"):
            wrapper.cursor()
        assert wrapper.connection is not kept
    finally:
        wrapper.close()
