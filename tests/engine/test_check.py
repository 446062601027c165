import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import F

from core import clock
from engine import check as check_mod
from engine.check import CHECKS, READS, invariants_check, task_placements_sql
from engine.check_run import Checkpoint, check_name, checks_run, rows_estimate
from engine.incidents import incidents_resolve
from engine.runner import runner_settle
from engine.signaling import signal_accept
from history.models import (
    Activation,
    Application,
    Attempt,
    Gate,
    InboxRecord,
    Incident,
    InstanceEvent,
    PollRound,
    Queue,
    ResultEvent,
    Signal,
    Step,
    Task,
    Wait,
    WorkflowInstance,
)
from testkit import states
from testkit.driver import task_step
from tests.engine.test_poison import INVALID, _results_poisoned


@pytest.fixture
def ran(engine):
    """A run with a finished TASK (a result event and its record) and a queued one."""
    instance = engine.start(engine.define([task_step("a"), task_step("b", after=["a"])]))
    engine.settle()
    engine.work()
    engine.settle()
    assert invariants_check() == []
    return instance


def _codes():
    return {violation.code for violation in invariants_check()}


def test_quota_drift_is_reported(ran):
    Application.objects.update(active_tasks=5)
    assert "quota_drift" in _codes()


def test_a_terminal_task_holding_a_permit_is_reported(ran):
    Task.objects.filter(state="SUCCEEDED").update(permit_held=True)
    assert {"terminal_task_holds_permit", "quota_drift"} <= _codes()


def test_a_sequence_gap_is_reported(ran):
    Activation.objects.filter(step__key="a").update(sequence=2)
    assert "activation_sequence_gap" in _codes()


def test_a_broken_ownership_is_reported(ran, engine):
    other = engine.start(engine.define([task_step("z")]))
    Task.objects.filter(state="QUEUED").update(source_instance_id=other.id)
    assert "task_source" in _codes()


def test_an_instance_revision_behind_a_child_is_reported(ran):
    Step.objects.filter(instance=ran, key="a").update(revision=ran.revision + 10)
    assert "revision_behind_children" in _codes()


def test_a_result_event_without_its_inbox_record_is_reported(ran):
    InboxRecord.objects.filter(source_id__in=ResultEvent.objects.values("id")).delete()
    assert "result_event_record" in _codes()


def test_a_gate_disagreeing_with_its_instance_is_reported(ran):
    WorkflowInstance.objects.filter(pk=ran.id).update(paused=True)
    assert "gate_state" in _codes()


def test_weave_check_prints_each_violation_with_ids_and_exits_1(ran, capsys):
    Application.objects.update(active_tasks=7)
    with pytest.raises(SystemExit) as exited:
        call_command("weave_check")
    assert exited.value.code == 1
    application_id = Application.objects.get().id
    assert (
        f"quota_drift: application counts 7 active tasks, 1 permits held [{application_id}]" in capsys.readouterr().out
    )


SIGNAL_STEP = {"key": "s", "kind": "SIGNAL", "name": "go", "payload_version": "1", "deadline_seconds": 60}


def _signalled(engine, correlation_key="") -> None:
    """An instance whose SIGNAL step is waiting, then consumes one accepted signal (which matches the wait unless
    its ``correlation_key`` is another)."""
    instance = engine.start(engine.define([SIGNAL_STEP]))
    engine.settle()
    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command={
            "name": "go",
            "payload_version": "1",
            "payload": {},
            "correlation_key": correlation_key,
            "reason": "r",
        },
        idempotency_key="s",
    )
    engine.settle()


def test_a_wait_winner_not_consumed_by_that_wait_is_reported(engine):
    _signalled(engine)
    assert invariants_check() == []
    Signal.objects.update(consumed_wait_id=None)
    assert "wait_winner" in _codes()


def test_a_waiting_wait_that_left_a_matching_buffered_signal_untaken_is_reported(engine):
    _signalled(engine, correlation_key="other")
    signal, wait = Signal.objects.get(), Wait.objects.get()
    assert (signal.state, wait.state) == ("PENDING", "WAITING")  # buffered: its correlation key is another's
    assert invariants_check() == []
    # Rows written directly: the engine takes a matching buffered signal where the wait appears, so the
    # state of a hang is made by hand — the signal now matches the wait that stays WAITING.
    Signal.objects.update(correlation_key="")
    assert _violations("wait_signal_untaken") == [(wait.id, signal.id)]
    Signal.objects.update(expires_at=clock.now())  # an expired signal is never taken: no hang
    assert _violations("wait_signal_untaken") == []


def test_weave_check_lists_the_open_incidents_with_their_duty_item_and_error_class(engine, capsys):
    poisoned, _, record, _ = _results_poisoned(engine, INVALID)
    runner_settle()
    incident = Incident.objects.get()
    call_command("weave_check")  # an item set aside breaks no invariant: exit 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        f"open incident: {incident.id} inbox inbox_record {record.id} instance={poisoned.id}"
        " json.decoder.JSONDecodeError count=1 last_seen="
    )
    assert incident.message not in lines[0]
    assert lines[1:] == ["open incidents: 1 (weave_incidents --resolve ID once fixed)", "weave_check: clean"]
    incidents_resolve(ids=[incident.id])
    call_command("weave_check")
    assert capsys.readouterr().out.splitlines() == ["open incidents: 0", "weave_check: clean"]


def test_an_instance_in_review_without_a_cause_or_time_is_reported(ran):
    WorkflowInstance.objects.filter(pk=ran.id).update(state="NEEDS_REVIEW")
    assert "review_cause_missing" in _codes()
    WorkflowInstance.objects.filter(pk=ran.id).update(review_cause="poll_failed")
    assert "review_cause_missing" in _codes()
    # A release before failure signatures puts instances in review without one: that is no violation.
    WorkflowInstance.objects.filter(pk=ran.id).update(review_since=ran.updated_at)
    assert "review_cause_missing" not in _codes()


@pytest.mark.parametrize(
    "left",
    [
        {"review_cause": "poll_failed"},
        {"review_step_key": "a"},
        {"review_since": "2026-01-01T00:00:00Z"},
        {"failure_signature_id": "f" * 32},
    ],
)
def test_an_instance_out_of_review_still_recording_a_review_is_reported(ran, left):
    WorkflowInstance.objects.filter(pk=ran.id).update(**left)
    assert "review_cause_stale" in _codes()


def test_a_review_naming_a_step_the_instance_does_not_have_is_reported(tenancy):
    state = states.task_failed_state(tenancy)
    assert invariants_check() == []
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(review_step_key="refund")
    assert [v.code for v in invariants_check()] == ["review_step_unknown"]


def _violations(code: str) -> list[tuple[str, ...]]:
    return [v.ids for v in invariants_check() if v.code == code]


def test_a_gap_in_an_instances_event_sequence_is_reported(ran):
    InstanceEvent.objects.filter(instance=ran, sequence=2).delete()
    assert _violations("event_sequence_gap") == [(ran.id,)]


def test_a_sequence_not_starting_at_1_is_reported(ran):
    InstanceEvent.objects.filter(instance=ran, sequence=1).delete()
    InstanceEvent.objects.filter(instance=ran).update(sequence=F("sequence") + 100)
    assert _violations("event_sequence_gap") == [(ran.id,)]


@pytest.mark.parametrize("model", [WorkflowInstance, Step, Activation, Task, Attempt, InboxRecord])
def test_a_row_whose_state_moved_without_an_event_is_reported(ran, model):
    row = model.objects.order_by("pk").first()
    model.objects.filter(pk=row.pk).update(state="CANCELLED" if model is not InboxRecord else "QUARANTINED")
    assert _violations("event_state_mismatch") == [(row.pk,)]


def test_a_step_left_pending_needs_no_event_but_an_active_one_does(ran, engine):
    waiting = engine.start(engine.define([task_step("z")]))  # its steps are not activated yet
    pending = Step.objects.get(instance=waiting, key="z")
    assert pending.state == "PENDING" and not InstanceEvent.objects.filter(subject_id=pending.id).exists()
    assert _violations("event_missing") == []
    other = Step.objects.get(instance=ran, key="a")
    InstanceEvent.objects.filter(subject_id=other.id).delete()
    Step.objects.filter(pk=pending.pk).update(state="ACTIVE")
    assert sorted(_violations("event_missing")) == sorted([(other.id,), (pending.id,)])


def test_a_row_without_events_is_allowed_after_a_reconstructed_prefix(ran):
    step = Step.objects.get(instance=ran, key="a")
    InstanceEvent.objects.filter(subject_id=step.id).delete()
    assert _violations("event_missing") == [(step.id,)]
    InstanceEvent.objects.filter(instance=ran, sequence=1).update(reconstructed=True)
    assert _violations("event_missing") == []


MISSING = "0" * 32


def _rows(instance):
    """The finished step ``a`` of ``ran`` with its activation, task and attempt, and the queued step ``b``'s."""
    a, b = (Step.objects.get(instance=instance, key=key) for key in ("a", "b"))
    activation_a, activation_b = (Activation.objects.get(step=step) for step in (a, b))
    task_a, task_b = (Task.objects.get(source_activation=activation) for activation in (activation_a, activation_b))
    return a, b, activation_a, activation_b, task_a, task_b


def test_a_step_of_a_missing_instance_is_reported(ran):
    a, *_ = _rows(ran)
    Step.objects.filter(pk=a.pk).update(instance_id=MISSING)
    assert _violations("step_orphan") == [(a.id, MISSING)]


def test_a_current_activation_of_another_step_or_missing_is_reported(ran):
    a, b, _, activation_b, _, _ = _rows(ran)
    Step.objects.filter(pk=a.pk).update(current_activation_id=activation_b.id)
    Step.objects.filter(pk=b.pk).update(current_activation_id=MISSING)
    assert sorted(_violations("step_current_activation")) == sorted([(a.id, activation_b.id), (b.id, MISSING)])


def test_a_current_activation_that_is_not_the_latest_is_reported(ran):
    a, _, activation_a, _, _, _ = _rows(ran)
    later = Activation.objects.get(pk=activation_a.pk)
    later.pk, later.sequence, later.task_id = MISSING, 2, None
    Activation.objects.bulk_create([later])
    assert _violations("step_current_not_latest") == [(a.id,)]


def test_an_activation_of_a_step_in_another_instance_is_reported(ran, engine):
    _, _, activation_a, _, _, _ = _rows(ran)
    other = engine.start(engine.define([task_step("z")]))
    Activation.objects.filter(pk=activation_a.pk).update(instance_id=other.id)
    assert _violations("activation_step") == [(activation_a.id,)]


def test_an_activation_naming_a_task_it_did_not_source_is_reported(ran):
    _, _, activation_a, _, task_a, task_b = _rows(ran)
    Activation.objects.filter(pk=activation_a.pk).update(task_id=task_b.id)
    assert _violations("activation_task") == [(activation_a.id, task_b.id)]
    assert _violations("task_activation") == [(task_a.id, activation_a.id)]


def test_a_task_off_its_steps_queue_is_reported(ran):
    _, _, _, _, task_a, _ = _rows(ran)
    queue = Queue.objects.create(namespace_id=task_a.namespace_id, name="elsewhere")
    Task.objects.filter(pk=task_a.pk).update(queue_id=queue.id)
    assert _violations("task_queue") == [(task_a.id, queue.id)]


def test_a_poll_task_without_its_round_or_a_round_of_another_task_is_reported(tenancy):
    state = states.poll_round_failed_state(tenancy)
    assert invariants_check() == []
    poll_round = PollRound.objects.get(task=state.tasks[0])
    PollRound.objects.filter(pk=poll_round.pk).update(activation_id=MISSING)
    assert _violations("poll_round_task") == [(state.tasks[0].id,)]
    assert _violations("task_poll_round") == [(state.tasks[0].id,)]


def test_a_wait_off_its_activations_step_and_an_activation_naming_a_foreign_wait_are_reported(engine):
    engine.start(engine.define([SIGNAL_STEP]))
    engine.settle()
    assert invariants_check() == []
    wait = Wait.objects.get()
    Wait.objects.filter(pk=wait.pk).update(step_id=MISSING)
    Activation.objects.filter(pk=wait.activation_id).update(wait_id=MISSING)
    assert _violations("wait_activation") == [(wait.id,)]
    assert _violations("activation_wait") == [(wait.activation_id,)]


def test_a_retry_of_a_missing_task_is_reported(ran):
    *_, task_b = _rows(ran)
    Task.objects.filter(pk=task_b.pk).update(retry_of_id=MISSING)
    assert _violations("retry_of_missing") == [(MISSING,)]


def test_attempt_counts_and_running_attempts_that_disagree_with_the_task_are_reported(ran):
    _, _, _, _, task_a, task_b = _rows(ran)
    Task.objects.filter(pk=task_b.pk).update(attempt_count=3)
    Attempt.objects.filter(task=task_a).update(state="RUNNING")
    assert _violations("attempt_count") == [(task_b.id,)]
    assert _violations("attempt_running") == [(task_a.id,)]


def test_a_missing_gate_is_reported(ran):
    Gate.objects.filter(pk=ran.pk).delete()
    assert _violations("gate_missing") == [(ran.id,)]


def test_a_record_of_a_missing_result_event_is_reported(ran):
    event = ResultEvent.objects.get()
    ResultEvent.objects.filter(pk=event.pk).delete()
    assert _violations("record_without_event") == [(event.id,)]


def test_a_signal_without_its_inbox_record_is_reported(engine):
    _signalled(engine)
    signal = Signal.objects.get()
    InboxRecord.objects.filter(signal_id=signal.id).delete()
    assert _violations("signal_without_record") == [(signal.id,)]


def test_a_live_task_without_a_permit_is_reported(ran):
    *_, task_b = _rows(ran)
    Task.objects.filter(pk=task_b.pk).update(permit_held=False)
    assert _violations("live_task_without_permit") == [(task_b.id,)]
    assert "quota_drift" in _codes()


def test_a_step_counter_behind_its_rows_is_reported(ran):
    Step.objects.filter(key="a").update(activation_count=F("activation_count") + 1)
    assert "step_counter_drift" in _codes()


def test_attempts_before_that_disagree_with_the_earlier_tasks_are_reported(ran):
    Step.objects.filter(key="a").update(attempts_before=3)
    assert "step_counter_drift" in _codes()


def test_weave_check_reports_each_check_with_rows_covered_rate_and_time_left(ran, capsys):
    call_command("weave_check", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("] ")[1].split()[0] for line in lines] == [check_name(check) for check in CHECKS]
    assert lines[0].startswith("[ 1/14] ownership") and lines[-1].startswith("[14/14] step_counters")
    total = sum(rows_estimate(model) for check in CHECKS for model in READS[check])
    assert f"{total} of {total} table rows (100 %)" in lines[-1] and lines[-1].endswith("0:00:00 left")


class _Killed(Exception):
    pass


def _run_until(checkpoint, finished: int) -> None:
    """A run killed once ``finished`` checks are recorded (their progress line comes after the record)."""
    lines = []

    def progress(line):
        lines.append(line)
        if len(lines) == finished:
            raise _Killed

    with pytest.raises(_Killed):
        list(checks_run(checkpoint=checkpoint, progress=progress))


def test_a_checkpointed_run_resumes_after_its_last_finished_check_with_that_checks_findings(ran, tmp_path, capsys):
    path = tmp_path / "check.json"
    quota = CHECKS.index(check_mod._quota) + 1
    Activation.objects.filter(step__key="a").update(sequence=2)  # found by sequences, before quota
    _run_until(Checkpoint(path), quota)
    assert list(json.loads(path.read_text())["done"]) == [check_name(check) for check in CHECKS[:quota]]
    # Repaired and broken again after the kill: the checks done earlier are not run again, so the gap
    # (found then) is reported and the quota drift (made since) is not; a later check sees its rows now.
    Activation.objects.filter(step__key="a").update(sequence=1)
    Application.objects.update(active_tasks=9)
    Step.objects.filter(instance=ran, key="a").update(revision=ran.revision + 10)
    with pytest.raises(SystemExit):
        call_command("weave_check", checkpoint=str(path))
    captured = capsys.readouterr()
    codes = {line.split(":")[0] for line in captured.out.splitlines() if line.split(":")[0] != "open incidents"}
    assert codes == {"activation_sequence_gap", "revision_behind_children"}
    assert f"resuming from {path}: {quota} check(s) done earlier" in captured.err
    assert not path.exists()
    # The finished run removed its checkpoint: the next one checks everything again.
    with pytest.raises(SystemExit):
        call_command("weave_check", checkpoint=str(path))
    assert "quota_drift" in capsys.readouterr().out


def test_a_checkpoint_of_another_database_or_of_nothing_is_refused_naming_the_option(ran, tmp_path):
    path = tmp_path / "check.json"
    path.write_text(json.dumps({"database": "elsewhere", "done": {}}))
    with pytest.raises(CommandError, match=r"--checkpoint: .* is a checkpoint of database elsewhere"):
        call_command("weave_check", checkpoint=str(path))
    path.write_text("not json")
    with pytest.raises(CommandError, match=r"--checkpoint: .* is not a checkpoint of weave_check"):
        call_command("weave_check", checkpoint=str(path))
    assert path.read_text() == "not json"


@pytest.mark.skipif(connection.vendor != "mysql", reason="query plans are MariaDB's")
def test_the_task_placement_scan_joins_each_hop_in_the_order_it_was_sorted_for(ran):
    # Each derived table of the task scan is sorted on the key the next hop looks up, so that hop reads its table
    # in primary-key order. An ORDER BY naming only the first table of a join lets MariaDB sort that table before
    # joining: the step lookups then came in instance order, one random page read per task (864 000 reads, 45 s
    # of 55 at 1M). Sorting after the join shows as a temporary table; sorting before it, as a bare filesort.
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {task_placements_sql()}")
        plan = cursor.fetchall()
    joins = {}
    for select_id, _, table, access, *_, extra in plan:
        joins.setdefault(select_id, []).append((table, access, extra or ""))
    sorted_first = {
        select_id: rows
        for select_id, rows in joins.items()
        if any(access == "eq_ref" for _, access, _ in rows[1:])
        and "filesort" in rows[0][2]
        and "temporary" not in rows[0][2]
    }
    assert not sorted_first, plan
