"""When the SDK sends a request again: backoff with jitter, Retry-After, bounded attempts and total wait."""

import datetime as dt
import email.utils

import httpx
import pytest
from weave_sdk import Conflict, ResourceExhausted, Retry, Unavailable, WeaveError, WeaveNetworkError

from tests.sdk.mock import T0, WORKFLOW, Server, W, Waits, client_for

G = "9" * 32
NOTE = {"id": G, "workflow_id": W, "text": "seen", "author": G, "created_at": "2026-09-18T08:00:00Z"}


def _error(code: str) -> str:
    return '{"request_id":"' + "b" * 32 + '","error":{"code":"' + code + '","message":"try again"}}'


UNAVAILABLE = _error("UNAVAILABLE")


def test_a_read_answered_503_is_read_again_after_an_exponential_backoff_with_jitter():
    low, high = Waits(share=0.0), Waits(share=1.0)
    for waits in (low, high):
        server = Server((503, UNAVAILABLE), (503, UNAVAILABLE), (503, UNAVAILABLE), (200, WORKFLOW))
        assert client_for(server, waits, first_wait=0.5).get_workflow(W).revision == 4
        assert len(server.requests) == 4 and len({str(r.url) for r in server.requests}) == 1
    # Each wait is between half and all of the doubling step, the random share choosing where.
    assert (low.waited, high.waited) == ([0.25, 0.5, 1.0], [0.5, 1.0, 2.0])


def test_the_backoff_step_stops_growing_at_max_wait():
    server, waits = Server((503, UNAVAILABLE)), Waits(share=1.0)
    with pytest.raises(Unavailable):
        client_for(server, waits, attempts=6, first_wait=1.0, max_wait=3.0, total_wait=60).get_workflow(W)
    assert waits.waited == [1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("retry_after", "waited"),
    [
        ("7", 7.0),
        (email.utils.format_datetime(T0 + dt.timedelta(seconds=12), usegmt=True), 12.0),
        (email.utils.format_datetime(T0 - dt.timedelta(minutes=1), usegmt=True), 0.0),
        ("soon", 0.25),  # unreadable: the backoff decides
        ("-3", 0.25),
    ],
)
def test_a_retry_after_in_seconds_or_as_an_http_date_is_waited_out_exactly(retry_after, waited):
    server, waits = Server((503, UNAVAILABLE, {"Retry-After": retry_after}), (200, WORKFLOW)), Waits()
    client_for(server, waits, first_wait=0.5).get_workflow(W)
    assert waits.waited == [waited] and len(server.requests) == 2


def test_a_retry_after_beyond_the_total_wait_ends_the_retries_with_the_503():
    server, waits = Server((503, UNAVAILABLE, {"Retry-After": "31"}), (200, WORKFLOW)), Waits()
    with pytest.raises(Unavailable) as refused:
        client_for(server, waits, total_wait=30).get_workflow(W)
    assert (refused.value.status, refused.value.code) == (503, "UNAVAILABLE")
    assert len(server.requests) == 1 and waits.waited == []


def test_the_waits_of_one_call_never_add_up_to_more_than_total_wait():
    server, waits = Server((0, httpx.ConnectError("down"))), Waits(share=1.0)
    with pytest.raises(WeaveNetworkError):
        client_for(server, waits, attempts=10, first_wait=1.0, max_wait=100, total_wait=10).get_workflow(W)
    # 1 + 2 + 4 = 7; the next step (8) would pass 10.
    assert waits.waited == [1.0, 2.0, 4.0] and len(server.requests) == 4


def test_a_read_is_sent_at_most_attempts_times_then_the_503_is_raised():
    server, waits = Server((503, UNAVAILABLE)), Waits()
    with pytest.raises(Unavailable):
        client_for(server, waits, attempts=4).get_workflow(W)
    assert len(server.requests) == 4 and len(waits.waited) == 3


def test_a_keyed_write_answered_503_is_re_sent_with_the_same_key_and_bytes_and_answers_the_replay():
    server = Server((503, UNAVAILABLE), (201, NOTE, {"Idempotent-Replayed": "true"}))
    waits = Waits()
    added = client_for(server, waits).add_workflow_note(W, idempotency_key="note-1", text="seen")
    assert (added.status, added.replayed, added.data.id) == (201, True, G)
    assert [r.headers["Idempotency-Key"] for r in server.requests] == ["note-1", "note-1"]
    assert {r.content for r in server.requests} == {b'{"text":"seen"}'} and len(waits.waited) == 1


@pytest.mark.parametrize("failure", [(503, UNAVAILABLE, {"Retry-After": "1"}), (0, httpx.ConnectError("down"))])
@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.pause_workflow(W, expected_control_revision=1),
        lambda c: c.acknowledge_workflow(W),
        lambda c: c.assign_workflow(W, assignee=""),
        lambda c: c.claim_task("payments", worker="w1"),
    ],
)
def test_a_write_without_an_idempotency_key_is_never_sent_again(failure, call):
    server, waits = Server(failure, (200, {})), Waits()
    with pytest.raises(WeaveError):
        call(client_for(server, waits))
    assert len(server.requests) == 1 and waits.waited == []


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (429, "RESOURCE_EXHAUSTED", ResourceExhausted),
        (409, "ABORTED", Conflict),
        (500, "INTERNAL", WeaveError),
    ],
)
def test_only_a_503_or_a_transport_error_is_sent_again_never_a_full_quota(status, code, error):
    # A 429 is a quota of active tasks, not a rate: it frees when a task finishes, which no wait can time.
    server, waits = Server((status, _error(code), {"Retry-After": "1"}), (200, {})), Waits()
    command = {"expected_revision": "7", "step_key": "charge"}
    with pytest.raises(error) as refused:
        client_for(server, waits).retry_step(W, idempotency_key="retry-1", command=command)
    assert (refused.value.status, refused.value.code) == (status, code)
    assert len(server.requests) == 1 and waits.waited == []


def test_attempts_1_never_sends_again():
    server, waits = Server((0, httpx.ReadTimeout("slow")), (200, WORKFLOW)), Waits()
    with pytest.raises(WeaveNetworkError) as failed:
        client_for(server, waits, attempts=1).get_workflow(W)
    assert "sent once" in failed.value.message and len(server.requests) == 1


@pytest.mark.parametrize(
    "policy",
    [{"attempts": 0}, {"attempts": 2.0}, {"first_wait": -1}, {"first_wait": 10, "max_wait": 5}, {"total_wait": -1}],
)
def test_a_retry_policy_out_of_bounds_is_refused(policy):
    with pytest.raises(ValueError):
        Retry(**policy)
