"""Keyset pages in either order, over a key of several fields with ties on the first."""

import datetime as dt

import pytest

from history.models import Signal
from history.selectors.pagination import keyset_page
from history.selectors.signals import SIGNALS
from tests.factories import SignalFactory

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("descending", [True, False])
def test_pages_in_either_order_visit_every_row_once_across_ties(workflow, descending):
    for n, c in enumerate("abcde"):
        SignalFactory(workflow=workflow, id=c * 32, accepted_at=T0 + dt.timedelta(seconds=n // 3))
    queryset = Signal.objects.filter(workflow_id=workflow.id)
    seen, after = [], None
    while True:
        page = keyset_page(queryset, kind=SIGNALS, after=after, limit=2, descending=descending)
        seen += [s.id for s in page.items]
        if page.next_key is None:
            break
        after = page.next_key
    ascending = [c * 32 for c in "abcde"]
    assert seen == (ascending[::-1] if descending else ascending)
