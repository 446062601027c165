"""ContinuePoll: resume the original wait after an authoritative PENDING."""

import datetime as dt

import pytest

from core import clock
from history.models import Activation, InboxRecord, PollRound, Step, Task, WorkflowInstance
from recovery.operations import poll_continue
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused

pytestmark = pytest.mark.django_db


def test_the_next_round_is_due_at_the_pending_event_plus_the_frozen_interval(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    receipt = rq.run(poll_continue, recoverer, state, rq.continue_poll(state))
    activation = Activation.objects.get(pk=state.activation.pk)
    assert activation.next_round_at == state.reviewed_event.created_at + dt.timedelta(seconds=60)
    assert activation.next_round_at < clock.now()  # due at once, never now + interval
    assert activation.state == "WAITING" and Step.objects.get(pk=state.step.pk).state == "WAITING"
    assert receipt.data["activation_id"] == activation.id and receipt.data["state"] == "NEEDS_REVIEW"


def test_continue_poll_does_not_requery_the_round_or_rewrite_inbox_dispositions(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    inbox = list(InboxRecord.objects.order_by("pk").values_list())
    rq.run(poll_continue, recoverer, state, rq.continue_poll(state))
    assert list(InboxRecord.objects.order_by("pk").values_list()) == inbox
    assert PollRound.objects.filter(instance=state.instance).count() == 2
    assert Task.objects.filter(source_instance=state.instance).count() == 2
    activation = Activation.objects.get(pk=state.activation.pk)
    assert (activation.used_rounds, activation.last_round_classification) == (2, "PENDING")
    assert WorkflowInstance.objects.get(pk=state.instance.pk).state == "NEEDS_REVIEW"


def test_continue_poll_refuses_when_the_rounds_are_used_up(tenancy, recoverer):
    state = states.poll_rounds_exhausted_state(tenancy)
    assert_refused(lambda: rq.run(poll_continue, recoverer, state, rq.continue_poll(state)), "FAILED_PRECONDITION")


def test_continue_poll_refuses_a_next_round_at_or_after_the_query_deadline(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    event_at = state.reviewed_event.created_at
    Activation.objects.filter(pk=state.activation.pk).update(poll_deadline_at=event_at + dt.timedelta(seconds=30))
    with clock.moved(event_at - clock.now()):
        command = rq.continue_poll(state)
        assert_refused(lambda: rq.run(poll_continue, recoverer, state, command), "FAILED_PRECONDITION")


def test_continue_poll_refuses_after_the_total_query_deadline(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    with clock.moved(dt.timedelta(hours=3)):
        command = rq.continue_poll(state)
        assert_refused(lambda: rq.run(poll_continue, recoverer, state, command), "FAILED_PRECONDITION")


def test_continue_poll_needs_a_consumed_pending_classification(tenancy, recoverer):
    failed = states.poll_round_failed_state(tenancy)
    assert_refused(lambda: rq.run(poll_continue, recoverer, failed, rq.continue_poll(failed)), "FAILED_PRECONDITION")
    state = states.poll_pending_reviewed_state(tenancy)
    Activation.objects.filter(pk=state.activation.pk).update(last_round_classification="")
    assert_refused(lambda: rq.run(poll_continue, recoverer, state, rq.continue_poll(state)), "FAILED_PRECONDITION")


def test_continue_poll_refuses_a_pending_answer_that_was_only_late_recorded(tenancy, recoverer):
    state = states.poll_pending_reviewed_state(tenancy)
    InboxRecord.objects.filter(source_id=state.reviewed_event.id).update(disposition="LATE_RECORDED")
    assert_refused(lambda: rq.run(poll_continue, recoverer, state, rq.continue_poll(state)), "FAILED_PRECONDITION")


def test_continue_poll_refuses_other_step_kinds(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    assert_refused(lambda: rq.run(poll_continue, recoverer, state, rq.continue_poll(state)), "FAILED_PRECONDITION")
