"""A prepared page (keys and rows in one statement) reads its keys from the list's index and only its own rows."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.ids import new_id
from history.models import InstanceEvent, Signal
from history.selectors.events import EventFilters, event_page
from history.selectors.pagination import prepared_page
from history.selectors.signals import SIGNALS, _signals_of
from tests.factories import SignalFactory
from tests.plans import MARIADB_PLANS, analysed

pytestmark = MARIADB_PLANS
ROWS, LIMIT = 3000, 20
T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def long_lists(workflow):
    """``ROWS`` signals and timeline events of one workflow, with exact statistics."""
    Signal.objects.bulk_create(
        SignalFactory.build(workflow=workflow, id=new_id(), accepted_at=T0 + dt.timedelta(seconds=n // 2))
        for n in range(ROWS)
    )
    InstanceEvent.objects.bulk_create(
        InstanceEvent(
            id=new_id(),
            instance=workflow,
            sequence=1000 + n,
            kind="step",
            subject_type="step",
            subject_id=new_id(),
            actor_kind="engine",
        )
        for n in range(1, ROWS + 1)
    )
    with connection.cursor() as cursor:
        for model in (Signal, InstanceEvent):
            cursor.execute(f"ANALYZE TABLE {model._meta.db_table} PERSISTENT FOR ALL")
            cursor.fetchall()
    return workflow


def _read_once(read) -> tuple[object, list[dict]]:
    with CaptureQueriesContext(connection) as captured:
        page = read()
    assert len(captured) == 1, [query["sql"] for query in captured]
    tables, _ = analysed(captured[0]["sql"])
    return page, tables


@pytest.mark.parametrize("descending", [True, False])
def test_a_page_deep_in_a_long_list_reads_its_own_rows_alone(long_lists, descending):
    middle = Signal.objects.filter(workflow=long_lists).order_by("accepted_at", "id")[ROWS // 2]
    signals, deep = (long_lists.namespace_id, long_lists.id), (middle.accepted_at, middle.id)
    reads = {
        "signals, first page": lambda: prepared_page(_signals_of, signals, kind=SIGNALS, after=None, limit=LIMIT),
        "signals, deep": lambda: prepared_page(
            _signals_of, signals, kind=SIGNALS, after=deep, limit=LIMIT, descending=descending
        ),
        "timeline, deep": lambda: event_page(
            instance=long_lists, filters=EventFilters(descending=descending), after=(1000 + ROWS // 2,), limit=LIMIT
        ),
    }
    for name, read in reads.items():
        page, tables = _read_once(read)
        assert len(page.items) == LIMIT and page.next_key is not None, name
        lists = [t for t in tables if t["table_name"] in ("history_signal", "history_instanceevent")]
        assert {t["access_type"] for t in lists} <= {"ref", "range", "eq_ref"}, (name, tables)
        assert all((t.get("r_rows") or 0) <= LIMIT + 1 for t in tables), (name, tables)
