"""One poisoned item never stops the background: it is set aside as an incident, every other item goes on.

The poisons are rows written before input limits existed, written here straight into the
database: a 5 000-digit integer, a document nested 100 000 levels, invalid JSON text, and a
definition row without an application.
"""

import datetime as dt
import io
import logging
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import InterfaceError, OperationalError

from core import clock
from engine import runner
from engine.background import BACKOFF_SECONDS, Outage
from engine.check import invariants_check
from engine.definitions import contract_violation
from engine.handlers import HANDLERS, Handler, HandlerResult
from engine.incidents import error_class_of
from engine.management.commands import weave_runner, weave_worker
from engine.signaling import signal_accept
from history.models import (
    InboxRecord,
    InboxState,
    Incident,
    InstanceState,
    ResultEvent,
    Signal,
    Task,
    TaskState,
    WorkflowDefinition,
    WorkflowInstance,
)
from testkit import states
from testkit.driver import task_step
from tests.engine.conftest import StoppingRecorder

CONTRACT = {"type": "object", "properties": {"n": {"type": "integer"}}}
HUGE = '{"n":' + "9" * 5000 + "}"
DEEP = "[" * 100_000 + "]" * 100_000
INVALID = '{"n":1'
POISONS = {"huge integer": HUGE, "nested 100 000 levels": DEEP, "invalid JSON": INVALID}


def _expected_error(spec: dict, text: str) -> str | None:
    """The error class the contract check raises on ``text`` today (None: it reads it without failing)."""
    try:
        contract_violation(step_spec=spec, value_text=text)
    except Exception as error:
        return error_class_of(error)
    return None


def _reload(instance) -> WorkflowInstance:
    return WorkflowInstance.objects.get(pk=instance.id)


def _results_poisoned(engine, text):
    """A poisoned and a healthy instance, each with a worked task; the poisoned result record is the older."""
    poisoned = states.started(engine, 1, [task_step("a", contract=CONTRACT)])[0]
    healthy = states.started(engine, 1, [task_step("b")])[0]
    runner.runner_settle()
    assert engine.work() and engine.work()
    ResultEvent.objects.filter(task__source_instance=poisoned).update(result=text)
    Task.objects.filter(source_instance=poisoned).update(result=text)
    record = InboxRecord.objects.get(instance=poisoned, state=InboxState.PENDING)
    return poisoned, healthy, record, WorkflowDefinition.objects.get(pk=poisoned.definition_id).step_spec("a")


def _send(engine, instance):
    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command={"name": "go", "payload_version": "1", "payload": {"n": 1}, "correlation_key": "", "reason": "r"},
        idempotency_key=f"sig-{instance.id}",
    )


def _payloads_poisoned(engine, text):
    """A poisoned and a healthy instance waiting on a signal; the poisoned signal is the older."""
    spec = {**states.SIGNAL, "contract": CONTRACT}
    poisoned = states.started(engine, 1, [spec])[0]
    healthy = states.started(engine, 1, [states.SIGNAL])[0]
    runner.runner_settle()
    _send(engine, poisoned)
    _send(engine, healthy)
    Signal.objects.filter(workflow=poisoned).update(payload=text)
    record = InboxRecord.objects.get(instance=poisoned, state=InboxState.PENDING)
    return poisoned, healthy, record, spec


def _assert_set_aside(incident, *, duty, kind, item_id, instance, error_class, poison=""):
    assert (incident.duty, incident.item_kind, incident.item_id) == (duty, kind, item_id)
    assert (incident.instance_id, incident.namespace_id) == (instance.id, instance.namespace_id)
    assert (incident.error_class, incident.count, incident.resolved_at) == (error_class, 1, None)
    assert 0 < len(incident.message) <= 1024
    instance = _reload(instance)
    assert instance.state == InstanceState.NEEDS_REVIEW
    assert error_class in instance.review_reason and item_id in instance.review_reason
    if poison:
        assert poison[:20] not in instance.review_reason


def _assert_counted_again(incident):
    """Resolved without fixing the cause, the item fails again: the same row counts 2 and reopens."""
    first_seen = incident.first_seen_at
    call_command("weave_incidents", "--resolve", incident.id, stdout=io.StringIO())
    assert Incident.objects.get(pk=incident.pk).resolved_at is not None
    clock.advance(dt.timedelta(seconds=1))
    runner.runner_settle()
    incident.refresh_from_db()
    assert (incident.count, incident.resolved_at, incident.first_seen_at) == (2, None, first_seen)
    assert incident.last_seen_at > first_seen
    assert Incident.objects.count() == 1


BUILDS = {"task result": _results_poisoned, "signal payload": _payloads_poisoned}


@pytest.mark.django_db
@pytest.mark.parametrize("poison", POISONS, ids=list(POISONS))
@pytest.mark.parametrize("where", BUILDS, ids=list(BUILDS))
def test_a_poisoned_inbox_record_is_set_aside_and_the_runner_serves_every_other_instance(engine, where, poison, caplog):
    poisoned, healthy, record, spec = BUILDS[where](engine, POISONS[poison])
    error_class = _expected_error(spec, POISONS[poison])
    with caplog.at_level(logging.ERROR, logger="weave.background"):
        passes = runner.runner_settle()
    assert passes < 20
    assert _reload(healthy).state == InstanceState.SUCCEEDED
    assert _reload(poisoned).state == InstanceState.NEEDS_REVIEW
    if error_class is None:  # the contract check reads it: an ordinary contract violation, no incident
        assert not Incident.objects.exists()
        assert InboxRecord.objects.get(pk=record.id).disposition == "CONTRACT_VIOLATION"
    else:
        incident = Incident.objects.get()
        _assert_set_aside(
            incident,
            duty="inbox",
            kind="inbox_record",
            item_id=record.id,
            instance=poisoned,
            error_class=error_class,
            poison=POISONS[poison],
        )
        assert InboxRecord.objects.get(pk=record.id).state == InboxState.PENDING
        logged = [r.getMessage() for r in caplog.records]
        assert any(record.id in line and error_class in line for line in logged)
        assert not any(POISONS[poison][:20] in line for line in logged)
        # While the incident is open the record is skipped: a settle ends after one idle pass.
        assert runner.runner_settle() == 1
        assert Incident.objects.get().count == 1
        _assert_counted_again(incident)
    assert invariants_check() == []


@pytest.mark.django_db
def test_later_records_of_a_set_aside_instance_wait_behind_the_poisoned_one(engine):
    spec = {**states.SIGNAL, "contract": CONTRACT}
    poisoned = states.started(engine, 1, [task_step("a", contract=CONTRACT), {**spec, "after": ["a"]}])[0]
    runner.runner_settle()
    assert engine.work()
    ResultEvent.objects.filter(task__source_instance=poisoned).update(result=INVALID)
    _send(engine, poisoned)  # a later record of the same instance
    runner.runner_settle()
    assert Incident.objects.get().item_id == InboxRecord.objects.filter(instance=poisoned).order_by("created_at")[0].id
    assert set(InboxRecord.objects.filter(instance=poisoned).values_list("state", flat=True)) == {InboxState.PENDING}
    assert runner.pass_inbox() == 0


def _without_application(instance) -> None:
    """Point the instance at a copy of its definition that names no application."""
    definition = WorkflowDefinition.objects.get(pk=instance.definition_id)
    broken = WorkflowDefinition.objects.create(
        namespace_id=definition.namespace_id,
        name="broken",
        version=1,
        spec={"steps": definition.spec["steps"]},
        queues=definition.queues,
    )
    WorkflowInstance.objects.filter(pk=instance.id).update(definition=broken)


@pytest.mark.django_db
def test_a_definition_without_application_sets_the_instance_aside_and_others_run_to_their_end(engine):
    poisoned, healthy = states.started(engine, 2, states.TASKS)
    _without_application(poisoned)
    runner.runner_settle()
    assert engine.work() is not None and engine.work() is None
    runner.runner_settle()
    assert _reload(healthy).state == InstanceState.SUCCEEDED
    incident = Incident.objects.get()
    _assert_set_aside(
        incident, duty="continuations", kind="instance", item_id=poisoned.id, instance=poisoned, error_class="KeyError"
    )
    _assert_counted_again(incident)
    assert invariants_check() == []


@pytest.mark.django_db
def test_stop_settlement_sets_aside_an_instance_whose_definition_has_no_application(engine):
    poisoned, healthy = states.instances_cancelled(engine, 2)
    _without_application(poisoned)
    runner.runner_settle()
    assert _reload(healthy).state == InstanceState.CANCELLED
    incident = Incident.objects.get()
    # CANCELLING enters review like RUNNING does (the stop intent is kept for Continue).
    _assert_set_aside(
        incident,
        duty="stop_settlement",
        kind="instance",
        item_id=poisoned.id,
        instance=poisoned,
        error_class="KeyError",
    )
    assert _reload(poisoned).stop_kind == "CANCEL"
    assert invariants_check() == []


@pytest.mark.django_db
def test_a_buffered_signal_with_a_poisoned_payload_sets_aside_the_record_whose_advance_opens_its_wait(engine):
    spec = {**states.SIGNAL, "contract": CONTRACT, "after": ["a"]}
    poisoned = states.started(engine, 1, [task_step("a"), spec])[0]
    runner.runner_settle()
    _send(engine, poisoned)
    Signal.objects.filter(workflow=poisoned).update(payload=INVALID)
    runner.runner_settle()  # buffered: no contract check yet
    assert not Incident.objects.exists()
    healthy = states.started(engine, 1, states.TASKS)[0]
    runner.runner_settle()
    while engine.work() is not None:
        pass
    runner.runner_settle()
    assert _reload(healthy).state == InstanceState.SUCCEEDED
    # a's result ends a and opens the signal wait, which takes the buffered signal in the same transaction.
    record = InboxRecord.objects.get(instance=poisoned, source_kind="RESULT_EVENT")
    _assert_set_aside(
        Incident.objects.get(),
        duty="inbox",
        kind="inbox_record",
        item_id=record.id,
        instance=poisoned,
        error_class="json.decoder.JSONDecodeError",
    )
    assert record.state == InboxState.PENDING and Signal.objects.get(workflow=poisoned).state == "PENDING"
    assert runner.runner_settle() == 1
    assert invariants_check() == []


@pytest.mark.django_db
def test_a_pass_that_fails_outside_any_item_is_logged_and_the_other_passes_still_run(engine, monkeypatch, caplog):
    states.results_pending(engine)

    def broken():
        raise RuntimeError("candidate query broke")

    monkeypatch.setitem(runner.PASSES, "timers", broken)
    monkeypatch.delitem(runner.DUE, "timers")  # run it whether or not a timer is due
    with caplog.at_level(logging.ERROR, logger="weave.background"):
        counts = runner.runner_pass()
    assert counts["timers"] == 0 and counts["inbox"] == 1
    assert "timers: the pass failed with RuntimeError; the other passes go on" in caplog.messages


@pytest.mark.django_db(transaction=True)  # Outage drops the connection
@pytest.mark.parametrize("error", [OperationalError, InterfaceError], ids=lambda e: e.__name__)
def test_a_database_error_is_not_poison_it_leaves_the_pass_records_nothing_and_is_backed_off(
    engine, monkeypatch, error
):
    states.results_pending(engine)

    def outage(*args, **kwargs):
        raise error("server has gone away")

    monkeypatch.setattr(runner, "inbox_consume_next", outage)
    with pytest.raises(error):
        runner.runner_pass()
    assert not Incident.objects.exists()
    stopping = StoppingRecorder()
    assert Outage("weave_runner", stopping).run(runner.runner_pass) is None
    assert stopping.waited == [BACKOFF_SECONDS[0]]
    assert InboxRecord.objects.get().state == InboxState.PENDING


@pytest.mark.django_db(transaction=True)
def test_the_weave_runner_loop_keeps_serving_other_instances_past_a_poisoned_item(engine, monkeypatch):
    poisoned, healthy, record, _ = _results_poisoned(engine, INVALID)
    passes = []

    def counted(**options):
        counts = runner.runner_pass(**options)
        passes.append(counts)
        if len(passes) == 6:
            raise KeyboardInterrupt  # how the loop is stopped from outside
        return counts

    monkeypatch.setattr(weave_runner, "runner_pass", counted)
    call_command("weave_runner", "--interval", "0.01")
    assert len(passes) == 6
    assert _reload(healthy).state == InstanceState.SUCCEEDED
    assert Incident.objects.get().item_id == record.id and Incident.objects.get().count == 1
    assert _reload(poisoned).state == InstanceState.NEEDS_REVIEW
    assert not any(passes[-1].values())
    assert invariants_check() == []


class _StopWhenQueueEmpty(threading.Event):
    """The worker loop's stop flag, raised once no task of the test is QUEUED any more."""

    def is_set(self):
        return super().is_set() or not Task.objects.filter(state=TaskState.QUEUED).exists()


@pytest.mark.django_db(transaction=True)
def test_the_weave_worker_loop_survives_a_handler_error_and_a_refused_completion(engine, monkeypatch):
    def raises(context):
        raise RuntimeError("handler bug")

    def unserialisable(context):
        return HandlerResult("SUCCEEDED", {"n": object()})

    monkeypatch.setitem(HANDLERS, "test.raises", Handler(run=raises, heartbeat=False))
    monkeypatch.setitem(HANDLERS, "test.unserialisable", Handler(run=unserialisable, heartbeat=False))
    failing = states.started(engine, 1, [task_step("a", handler="test.raises", priority=3, max_attempts=1)])[0]
    refused = states.started(engine, 1, [task_step("a", handler="test.unserialisable", priority=2)])[0]
    healthy = states.started(engine, 1, [task_step("a", priority=1)])[0]
    runner.runner_settle()
    monkeypatch.setattr(weave_worker.threading, "Event", _StopWhenQueueEmpty)
    call_command("weave_worker", "--queue", "payments", "--interval", "0.01")
    # A handler's exception is a FAILED completion carrying its error class.
    failed = Task.objects.get(source_instance=failing)
    assert failed.state == TaskState.FAILED and '"error":"RuntimeError"' in failed.result
    # A completion that cannot be written is set aside; the lease then runs out as usual.
    incident = Incident.objects.get()
    leased = Task.objects.get(source_instance=refused)
    _assert_set_aside(
        incident, duty="worker", kind="task", item_id=leased.id, instance=refused, error_class="TypeError"
    )
    assert leased.state == TaskState.LEASED
    assert Task.objects.get(source_instance=healthy).state == TaskState.SUCCEEDED
    runner.runner_settle()
    assert _reload(healthy).state == InstanceState.SUCCEEDED
    assert _reload(failing).state == InstanceState.NEEDS_REVIEW
    assert invariants_check() == []


@pytest.mark.django_db
def test_weave_incidents_lists_the_open_incidents_without_their_message_and_refuses_an_unknown_id(engine):
    poisoned, healthy, record, _ = _results_poisoned(engine, INVALID)
    runner.runner_settle()
    incident = Incident.objects.get()
    out = io.StringIO()
    call_command("weave_incidents", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "incidents: 1 open"
    assert lines[0].startswith(f"{incident.id} inbox inbox_record {record.id} instance={poisoned.id}")
    assert "json.decoder.JSONDecodeError count=1" in lines[0] and incident.message not in out.getvalue()
    with pytest.raises(CommandError, match="--resolve: no incident " + "0" * 32):
        call_command("weave_incidents", "--resolve", incident.id, "0" * 32)
    assert Incident.objects.get().resolved_at is None


@pytest.mark.django_db
def test_an_incident_message_is_cut_to_1024_characters_and_stored_even_with_a_lone_surrogate_or_nul(
    engine, monkeypatch
):
    instance = states.results_pending(engine)[0]

    def poisoned(*, instance_id):
        raise ValueError("bad \ud800 and \x00 " + "x" * 5000)

    monkeypatch.setattr(runner, "inbox_consume_next", poisoned)
    assert runner.runner_pass()["inbox"] == 0
    incident = Incident.objects.get()
    assert len(incident.message) == 1024 and incident.message.startswith("bad \\ud800 and \\x00 xxx")
    assert (incident.item_id, incident.instance_id) == (InboxRecord.objects.get().id, instance.id)
