"""Instances from before the timeline get a reconstructed prefix that satisfies the timeline checks."""

import importlib

import pytest
from django.apps import apps

from engine.check import invariants_check
from history.models import InstanceEvent, Step, WorkflowInstance
from testkit import states

pytestmark = pytest.mark.django_db
migration = importlib.import_module("history.migrations.0009_timeline_reconstruct")

BUILDS = [
    states.task_unknown_state,
    states.task_reviewed_state,
    states.task_retried_state,
    states.poll_round_failed_state,
    states.signal_contract_violation_state,
    states.timer_late_state,
]


def _forget(instance_id: str) -> None:
    """The instance as it was before the timeline: its rows, no events."""
    InstanceEvent.objects.filter(instance_id=instance_id).delete()


@pytest.mark.parametrize("build", BUILDS, ids=[b.__name__ for b in BUILDS])
def test_a_reconstructed_prefix_satisfies_the_timeline_checks(tenancy, build):
    state = build(tenancy)
    _forget(state.instance.id)
    migration.timeline_reconstruct(apps, None)
    assert invariants_check() == []
    events = list(InstanceEvent.objects.filter(instance_id=state.instance.id).order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.reconstructed and e.actor_kind == "engine" and e.actor_id == "" for e in events)
    instance = WorkflowInstance.objects.get(pk=state.instance.id)
    assert (events[0].kind, events[0].after) == ("instance.created", "RUNNING")
    assert [(e.before, e.after, e.detail) for e in events if e.kind == "instance.state"] == [
        ("RUNNING", instance.state, instance.review_cause)
    ]
    # Every row appears once as created, in the order it was created.
    created = [e for e in events if e.kind.endswith(".created")]
    assert len({e.subject_id for e in created}) == len(created)
    assert [e.created_at for e in created] == sorted(e.created_at for e in created)
    audits = [e for e in events if e.subject_type == "audit"]
    assert audits and all(e.audit_id == e.subject_id and e.operation_id and e.detail for e in audits)


def test_each_row_gets_a_created_event_and_a_state_event_when_it_moved_on(tenancy):
    state = states.task_unknown_state(tenancy)
    _forget(state.instance.id)
    migration.timeline_reconstruct(apps, None)
    task = [(e.kind, e.before, e.after, e.step_key) for e in InstanceEvent.objects.filter(subject_id=state.task.id)]
    assert sorted(task) == [
        ("task.created", "", "QUEUED", state.step.key),
        ("task.state", "QUEUED", "NEEDS_REVIEW", state.step.key),
    ]
    root = Step.objects.get(instance_id=state.instance.id, key="$root")
    assert list(InstanceEvent.objects.filter(subject_id=root.id).values_list("kind", "after")) == [
        ("step.created", "ACTIVE")
    ]


def test_instances_with_events_are_left_alone_and_a_second_run_writes_nothing(tenancy):
    kept = states.task_unknown_state(tenancy)
    forgotten = states.task_failed_state(tenancy)
    _forget(forgotten.instance.id)
    before = list(InstanceEvent.objects.filter(instance_id=kept.instance.id).values_list("id", "sequence"))
    migration.timeline_reconstruct(apps, None)
    after = list(InstanceEvent.objects.filter(instance_id=kept.instance.id).values_list("id", "sequence"))
    assert after == before
    count = InstanceEvent.objects.count()
    migration.timeline_reconstruct(apps, None)
    assert InstanceEvent.objects.count() == count


def test_a_batch_boundary_splits_no_instance(tenancy, monkeypatch):
    monkeypatch.setattr(migration, "BATCH", 1)
    built = [states.task_unknown_state(tenancy), states.timer_late_state(tenancy)]
    for state in built:
        _forget(state.instance.id)
    migration.timeline_reconstruct(apps, None)
    assert invariants_check() == []
    assert all(InstanceEvent.objects.filter(instance_id=s.instance.id, reconstructed=True).exists() for s in built)
