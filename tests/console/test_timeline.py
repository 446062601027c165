"""The instance page's timeline: newest first, keyset pages, filters by step and kind, links to each subject."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from history.models import InstanceEvent, WorkflowOperation
from history.selectors.instance_page import EVENTS_PER_PAGE
from testkit import states
from testkit.driver import Engine


@pytest.fixture
def retried(tenancy):
    """Two tasks failed for good around a RetryStep and a Continue: more events than one page."""
    return states.task_retried_state(tenancy)


@pytest.fixture
def page_of(client, console_user):
    client.force_login(console_user("olga", "operators"))

    def get(state, query=""):
        response = client.get(f"/admin/history/workflowinstance/{state.instance.id}/change/{query}")
        assert response.status_code == 200
        return response.content.decode()

    return get


def _shown(html) -> list[int]:
    return [int(n) for n in re.findall(r'data-event="(\d+)"', html)]


def _older(html) -> str | None:
    found = re.search(r'href="([^"]*)" id="timeline-older"', html)
    return found and found.group(1).replace("&amp;", "&")


def _walk(page_of, state, query="") -> list[list[int]]:
    """The events of each page, from the first page of ``query`` through its older links."""
    html, pages = page_of(state, query), []
    while True:
        pages.append(_shown(html))
        older = _older(html)
        if older is None:
            return pages
        html = page_of(state, older)
        assert 'id="timeline-newest"' in html


def _sequences(state, **filters) -> list[int]:
    rows = InstanceEvent.objects.filter(instance=state.instance, **filters).order_by("-sequence")
    return list(rows.values_list("sequence", flat=True))


def test_the_timeline_shows_the_newest_events_first(retried, page_of):
    html = page_of(retried)
    assert _sequences(retried)[0] > EVENTS_PER_PAGE
    assert _shown(html) == _sequences(retried)[:EVENTS_PER_PAGE]
    assert 'id="timeline-newest"' not in html


def test_the_older_links_walk_the_whole_timeline_without_counting(retried, page_of):
    with CaptureQueriesContext(connection) as captured:
        pages = _walk(page_of, retried)
    assert len(pages) == 2 and sum(pages, []) == _sequences(retried)
    assert not [q for q in captured.captured_queries if "COUNT(" in q["sql"].upper() and "instanceevent" in q["sql"]]


def test_the_timeline_filters_by_step_and_kind_and_keeps_the_filters_when_paging(retried, page_of):
    key = retried.step.key
    assert _shown(page_of(retried, f"?step={key}")) == _sequences(retried, step_key=key)[:EVENTS_PER_PAGE]
    assert _shown(page_of(retried, "?kind=task.state")) == _sequences(retried, kind="task.state")
    both = page_of(retried, f"?step={key}&kind=activation.state")
    assert _shown(both) and _shown(both) == _sequences(retried, step_key=key, kind="activation.state")
    assert '<option value="activation.state" selected>' in both
    newest, *_, oldest = _sequences(retried)
    html = page_of(retried, f"?step={key}&before={newest}")
    assert set(_shown(html)) <= set(_sequences(retried, step_key=key)) and newest not in _shown(html)
    assert _shown(page_of(retried, f"?before={oldest}")) == []


def test_the_older_links_keep_the_filters(retried, page_of, monkeypatch):
    monkeypatch.setattr("history.selectors.instance_page.EVENTS_PER_PAGE", 2)
    key = retried.step.key
    pages = _walk(page_of, retried, f"?step={key}&kind=step.state")
    wanted = _sequences(retried, step_key=key, kind="step.state")
    assert len(pages) == 2 and sum(pages, []) == wanted


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?kind=task.done", "kind must be one of"),
        ("?step=-charge", "step_key must be"),
        ("?before=abc", "before must be a decimal integer"),
        ("?before=01", "before must be a decimal integer"),
        ("?before=" + "9" * 30, "before must be a decimal integer"),
    ],
)
def test_a_bad_filter_value_is_a_message_and_the_page_shows_unfiltered(retried, page_of, query, message):
    html = page_of(retried, query)
    assert "Timeline filter ignored: " + message in html
    assert _shown(html) == _sequences(retried)[:EVENTS_PER_PAGE]


def test_each_row_links_its_subject_to_its_admin_page(retried, page_of):
    html = page_of(retried, "?kind=activation.created")
    url = reverse("admin:history_activation_change", args=[retried.activation.id])
    assert f'href="{url}"' in html
    task = page_of(retried, "?kind=task.state")
    assert f'href="{reverse("admin:history_task_change", args=[retried.task.id])}"' in task


def test_audit_subjects_link_to_their_audit_only_for_auditors(retried, client, console_user):
    start = WorkflowOperation.objects.get(workflow=retried.instance, action="workflow.start")
    url = reverse("admin:history_workflowoperation_change", args=[start.id])
    path = f"/admin/history/workflowinstance/{retried.instance.id}/change/?kind=audit.created"
    client.force_login(console_user("olga", "operators"))
    assert f'href="{url}"' not in client.get(path).content.decode()
    client.force_login(console_user("audrey", "auditors"))
    assert f'href="{url}"' in client.get(path).content.decode()


def _page_queries(client, state) -> int:
    url = f"/admin/history/workflowinstance/{state.instance.id}/change/"
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_page_query_count_does_not_grow_with_the_timeline(tenancy, client, console_user):
    """Two instances of one shape, one with many more events (signals buffered after its review)."""
    small, large = states.signal_contract_violation_state(tenancy), states.signal_contract_violation_state(tenancy)
    engine = Engine(*tenancy)
    for number in range(20):
        states._signalled(engine, large.instance, states.SIGNAL_STEP["name"], {"n": number})
    assert InstanceEvent.objects.filter(instance=large.instance).count() > 3 * EVENTS_PER_PAGE
    client.force_login(console_user("olga", "operators"))
    assert _page_queries(client, small) == _page_queries(client, large)


def test_the_rows_a_repair_wrote_carry_its_badge_and_no_other_does(retried, page_of):
    html = "".join(page_of(retried, f"?before={before}") for before in (10**6, EVENTS_PER_PAGE + 1))
    badges = {
        int(sequence): re.findall(r"repair: ([a-z-]+)</span>", row)
        for sequence, row in re.findall(r'<tr data-event="(\d+)"(.*?)</tr>', html, re.S)
    }
    stored = dict(InstanceEvent.objects.filter(instance=retried.instance).values_list("sequence", "repair"))
    assert set(badges) == set(stored)  # the two pages hold the whole timeline
    assert {sequence: (found[0] if found else "") for sequence, found in badges.items()} == stored
    assert {"retry-step", "continue"} <= set(stored.values())
