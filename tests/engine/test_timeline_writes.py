"""Every engine transition appends exactly its events to the instance's timeline, in its transaction.

The transitions are the fault tests' list (each built through the engine); each event is
(kind, step key, before, after, detail, actor kind). An instance entering review names its cause.
"""

import pytest
from django.db import DatabaseError, connection, transaction

from history.events import SUBJECT_TYPES
from history.models import InstanceEvent, ResultEvent, WorkflowInstance
from tests.engine.test_faults import TRANSITIONS
from tests.recovery.digest import FaultAt, history_digest

CAUSE = object()  # the review cause the instance row holds after the transition

EXPECTED = {
    "continuations: activate a TASK step": [
        ("task.created", "a", "", "QUEUED", "", "engine"),
        ("activation.created", "a", "", "ACTIVE", "", "engine"),
        ("step.state", "a", "PENDING", "ACTIVE", "", "engine"),
    ],
    "continuations: activate a POLL step": [
        ("task.created", "settle", "", "QUEUED", "", "engine"),
        ("activation.created", "settle", "", "ACTIVE", "", "engine"),
        ("step.state", "settle", "PENDING", "ACTIVE", "", "engine"),
    ],
    "continuations: activate a SIGNAL step": [
        ("activation.created", "s", "", "WAITING", "", "engine"),
        ("wait.created", "s", "", "WAITING", "", "engine"),
        ("step.state", "s", "PENDING", "WAITING", "", "engine"),
    ],
    "continuations: activate a TIMER step": [
        ("activation.created", "t", "", "WAITING", "", "engine"),
        ("wait.created", "t", "", "WAITING", "", "engine"),
        ("step.state", "t", "PENDING", "WAITING", "", "engine"),
    ],
    "continuations: finish the instance": [
        ("step.state", "$root", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("instance.state", "", "RUNNING", "SUCCEEDED", "", "engine"),
    ],
    "inbox: TASK result applied": [
        ("step.state", "a", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("activation.state", "a", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("inbox.state", "a", "PENDING", "CONSUMED", "APPLIED", "engine"),
        # The step's continuation is applied in the same transaction: its only step done, the instance ends.
        ("step.state", "$root", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("instance.state", "", "RUNNING", "SUCCEEDED", "", "engine"),
    ],
    "inbox: TASK failure puts the step in review": [
        ("step.state", "a", "ACTIVE", "FAILED", "", "engine"),
        ("activation.state", "a", "ACTIVE", "FAILED", "", "engine"),
        ("inbox.state", "a", "PENDING", "CONSUMED", "APPLIED", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "inbox: TASK result breaks its contract": [
        ("step.state", "a", "ACTIVE", "NEEDS_REVIEW", "", "engine"),
        ("activation.state", "a", "ACTIVE", "NEEDS_REVIEW", "", "engine"),
        ("inbox.state", "a", "PENDING", "CONSUMED", "CONTRACT_VIOLATION", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "inbox: UNKNOWN event of an expired lease": [
        ("step.state", "a", "ACTIVE", "NEEDS_REVIEW", "", "engine"),
        ("activation.state", "a", "ACTIVE", "NEEDS_REVIEW", "", "engine"),
        ("inbox.state", "a", "PENDING", "CONSUMED", "APPLIED", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "inbox: REVIEWED event recorded": [
        ("inbox.state", "a", "PENDING", "CONSUMED", "APPLIED", "engine"),
    ],
    "inbox: late result only recorded": [
        ("inbox.state", "a", "PENDING", "CONSUMED", "LATE_RECORDED", "engine"),
    ],
    "inbox: record off its fixed queue quarantined": [
        ("inbox.state", "a", "PENDING", "QUARANTINED", "", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "inbox: records of a missing instance quarantined": [
        ("inbox.state", "a", "PENDING", "QUARANTINED", "", "engine"),
    ],
    "inbox: POLL answer PENDING schedules the next round": [
        ("step.state", "settle", "ACTIVE", "WAITING", "", "engine"),
        ("activation.state", "settle", "ACTIVE", "WAITING", "", "engine"),
        ("inbox.state", "settle", "PENDING", "CONSUMED", "APPLIED", "engine"),
    ],
    "inbox: POLL answer done succeeds the step": [
        ("step.state", "settle", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("activation.state", "settle", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("inbox.state", "settle", "PENDING", "CONSUMED", "APPLIED", "engine"),
        # The step's continuation is applied in the same transaction: its only step done, the instance ends.
        ("step.state", "$root", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("instance.state", "", "RUNNING", "SUCCEEDED", "", "engine"),
    ],
    "inbox: signal satisfies its wait": [
        ("step.state", "s", "WAITING", "SUCCEEDED", "", "engine"),
        ("activation.state", "s", "WAITING", "SUCCEEDED", "", "engine"),
        ("wait.state", "s", "WAITING", "SATISFIED", "", "engine"),
        ("signal.state", "s", "PENDING", "CONSUMED", "", "engine"),
        ("inbox.state", "s", "PENDING", "CONSUMED", "APPLIED", "engine"),
        # The step's continuation is applied in the same transaction: its only step done, the instance ends.
        ("step.state", "$root", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("instance.state", "", "RUNNING", "SUCCEEDED", "", "engine"),
    ],
    "inbox: signal of another version rejected": [
        ("signal.state", "s", "PENDING", "REJECTED", "", "engine"),
        ("inbox.state", "s", "PENDING", "CONSUMED", "REJECTED", "engine"),
    ],
    "inbox: signal breaking the contract": [
        ("step.state", "s", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("activation.state", "s", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("wait.state", "s", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("signal.state", "s", "PENDING", "REJECTED", "", "engine"),
        ("inbox.state", "s", "PENDING", "CONSUMED", "CONTRACT_VIOLATION", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "inbox: early signal buffered": [
        ("inbox.state", "s", "PENDING", "CONSUMED", "BUFFERED", "engine"),
    ],
    "inbox: a result opens a signal wait that takes its buffered signal": [
        ("step.state", "a", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("activation.state", "a", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("inbox.state", "a", "PENDING", "CONSUMED", "APPLIED", "engine"),
        # The advance activates s, whose new wait takes the buffered signal at once: s never shows WAITING.
        ("activation.created", "s", "", "WAITING", "", "engine"),
        ("wait.created", "s", "", "WAITING", "", "engine"),
        ("step.state", "s", "PENDING", "SUCCEEDED", "", "engine"),
        ("activation.state", "s", "WAITING", "SUCCEEDED", "", "engine"),
        ("wait.state", "s", "WAITING", "SATISFIED", "", "engine"),
        ("signal.state", "s", "PENDING", "CONSUMED", "", "engine"),
        ("step.state", "$root", "ACTIVE", "SUCCEEDED", "", "engine"),
        ("instance.state", "", "RUNNING", "SUCCEEDED", "", "engine"),
    ],
    "signal expiry: a buffered signal past its TTL": [
        ("signal.state", "s", "PENDING", "EXPIRED", "", "engine"),
    ],
    "lease expiry: attempt UNKNOWN": [
        ("attempt.state", "a", "RUNNING", "UNKNOWN", "", "engine"),
        ("task.state", "a", "LEASED", "NEEDS_REVIEW", "", "engine"),
        ("result.created", "a", "", "", "UNKNOWN", "engine"),
        ("inbox.created", "a", "", "PENDING", "", "engine"),
    ],
    "task deadline: a QUEUED task past its latest start fails": [
        ("task.state", "a", "QUEUED", "FAILED", "", "engine"),
        ("result.created", "a", "", "", "RESULT", "engine"),
        ("inbox.created", "a", "", "PENDING", "", "engine"),
    ],
    "poll rounds: open the next round": [
        ("task.created", "settle", "", "QUEUED", "", "engine"),
        ("activation.state", "settle", "WAITING", "ACTIVE", "", "engine"),
        ("step.state", "settle", "WAITING", "ACTIVE", "", "engine"),
    ],
    "poll rounds: past the poll deadline enters review": [
        ("activation.state", "settle", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("step.state", "settle", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "timers: a due timer fires": [
        ("step.state", "t", "WAITING", "SUCCEEDED", "", "engine"),
        ("activation.state", "t", "WAITING", "SUCCEEDED", "", "engine"),
        ("wait.state", "t", "WAITING", "SATISFIED", "", "engine"),
    ],
    "timers: a timer first seen too late enters review": [
        ("step.state", "t", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("activation.state", "t", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("wait.state", "t", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "wait deadline: the wait expires": [
        ("step.state", "s", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("activation.state", "s", "WAITING", "NEEDS_REVIEW", "", "engine"),
        ("wait.state", "s", "WAITING", "EXPIRED", "", "engine"),
        ("instance.state", "", "RUNNING", "NEEDS_REVIEW", CAUSE, "engine"),
    ],
    "instance deadline: RUNNING → CANCELLING": [
        ("instance.state", "", "RUNNING", "CANCELLING", "", "engine"),
    ],
    "stop settlement: cancel a queued task and settle CANCELLED": [
        ("task.state", "a", "QUEUED", "CANCELLED", "", "engine"),
        ("activation.state", "a", "ACTIVE", "CANCELLED", "", "engine"),
        ("step.state", "a", "ACTIVE", "CANCELLED", "", "engine"),
        ("step.state", "$root", "ACTIVE", "CANCELLED", "", "engine"),
        ("instance.state", "", "CANCELLING", "CANCELLED", "", "engine"),
    ],
    "stop settlement: settle FAILED after the instance deadline": [
        ("task.state", "a", "QUEUED", "CANCELLED", "", "engine"),
        ("activation.state", "a", "ACTIVE", "CANCELLED", "", "engine"),
        ("step.state", "a", "ACTIVE", "CANCELLED", "", "engine"),
        ("step.state", "$root", "ACTIVE", "FAILED", "", "engine"),
        ("instance.state", "", "CANCELLING", "FAILED", "", "engine"),
    ],
    "worker: claim": [
        ("attempt.created", "a", "", "RUNNING", "", "worker"),
        ("task.state", "a", "QUEUED", "LEASED", "", "worker"),
    ],
    "worker: heartbeat": [],
    "worker: complete SUCCEEDED": [
        ("attempt.state", "a", "RUNNING", "SUCCEEDED", "", "worker"),
        ("task.state", "a", "LEASED", "SUCCEEDED", "", "worker"),
        ("result.created", "a", "", "", "RESULT", "worker"),
        ("inbox.created", "a", "", "PENDING", "", "worker"),
    ],
    "worker: retryable failure requeues": [
        ("attempt.state", "a", "RUNNING", "FAILED", "", "worker"),
        ("task.state", "a", "LEASED", "QUEUED", "", "worker"),
    ],
    "worker: terminal failure": [
        ("attempt.state", "a", "RUNNING", "FAILED", "", "worker"),
        ("task.state", "a", "LEASED", "FAILED", "", "worker"),
        ("result.created", "a", "", "", "RESULT", "worker"),
        ("inbox.created", "a", "", "PENDING", "", "worker"),
    ],
    "service: start": [
        ("instance.created", "", "", "RUNNING", "", "operator"),
        ("step.created", "$root", "", "ACTIVE", "", "operator"),
        ("audit.created", "", "", "", "workflow.start", "operator"),
    ],
    "service: accept a signal": [
        ("signal.created", "s", "", "PENDING", "", "operator"),
        ("audit.created", "s", "", "", "workflow.signal", "operator"),
        ("inbox.created", "s", "", "PENDING", "", "operator"),
    ],
    "service: pause": [
        ("audit.created", "", "", "", "workflow.pause", "operator"),
    ],
    "service: resume": [
        ("audit.created", "", "", "", "workflow.resume", "operator"),
    ],
    "service: cancel": [
        ("instance.state", "", "RUNNING", "CANCELLING", "", "operator"),
        ("audit.created", "", "", "", "workflow.cancel", "operator"),
    ],
}
MODELS = {subject: model for model, subject in SUBJECT_TYPES.items()}


def _new_events(seen: set[str]) -> list[InstanceEvent]:
    return [e for e in InstanceEvent.objects.order_by("instance_id", "sequence") if e.id not in seen]


def _actor_id(engine, kind: str) -> str:
    return {"engine": "", "worker": "w1", "operator": engine.identity.actor_id}[kind]


def _assert_gap_free() -> None:
    by_instance: dict[str, list[int]] = {}
    for instance_id, sequence in InstanceEvent.objects.order_by("sequence").values_list("instance_id", "sequence"):
        by_instance.setdefault(instance_id, []).append(sequence)
    for instance_id, sequences in by_instance.items():
        assert sequences == list(range(1, len(sequences) + 1)), instance_id


def test_every_engine_transition_is_listed():
    assert set(EXPECTED) == {t.name for t in TRANSITIONS}


@pytest.mark.django_db
@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_each_engine_transition_appends_exactly_its_events(engine, transition):
    built = transition.build(engine)
    seen = set(InstanceEvent.objects.values_list("id", flat=True))
    assert transition.run(engine, built) or transition.name == "worker: heartbeat"
    added = _new_events(seen)
    causes = dict(WorkflowInstance.objects.values_list("id", "review_cause"))
    expected = [
        (kind, key, before, after, causes.get(e.instance_id, "") if detail is CAUSE else detail, actor)
        for e, (kind, key, before, after, detail, actor) in zip(added, EXPECTED[transition.name], strict=False)
    ]
    assert [(e.kind, e.step_key, e.before, e.after, e.detail, e.actor_kind) for e in added] == expected
    assert len(added) == len(EXPECTED[transition.name])
    for event in added:
        subject = MODELS[event.subject_type] if event.subject_type != "audit" else None
        assert event.kind.split(".")[0] == event.subject_type
        assert event.actor_id == _actor_id(engine, event.actor_kind)
        assert not event.reconstructed
        if subject is not None:
            row = subject.objects.get(pk=event.subject_id)
            if event.kind.endswith(".state") or hasattr(row, "state_at_load"):
                # the last event of a subject names the state its row holds now
                last = InstanceEvent.objects.filter(subject_id=row.pk).order_by("-sequence").first()
                assert last.after == (row.state if hasattr(row, "state_at_load") else "")
        else:
            assert event.audit_id == event.subject_id and event.operation_id
    _assert_gap_free()


@pytest.mark.django_db
def test_a_transition_rolled_back_at_its_last_event_leaves_neither_the_change_nor_any_event(engine):
    transition = next(t for t in TRANSITIONS if t.name == "inbox: TASK result applied")
    built = transition.build(engine)
    before, events = history_digest(), InstanceEvent.objects.count()
    with transaction.atomic():
        fault = FaultAt(0)
        with connection.execute_wrapper(fault):
            transition.run(engine, built)
        transaction.set_rollback(True)
    last_event_write = max(n for n, sql in enumerate(fault.writes, 1) if "history_instanceevent" in sql)
    with pytest.raises(DatabaseError), connection.execute_wrapper(FaultAt(last_event_write)):
        transition.run(engine, built)
    assert history_digest() == before and InstanceEvent.objects.count() == events
    assert ResultEvent.objects.count() == 1  # the state built, untouched
