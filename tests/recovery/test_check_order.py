"""The order of checks and idempotency: each refusal is the first failing check, nothing written."""

import pytest

from core import clock
from core.identity import Identity
from history.credentials import identity_of_credential
from history.models import (
    Activation,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Namespace,
    Scope,
    WorkflowInstance,
)
from history.tenancy import namespace_ensure
from recovery.operations import instance_continue, step_resolve, step_retry, task_review
from testkit import requests as rq
from testkit import states
from tests.recovery.digest import assert_refused, history_digest

pytestmark = pytest.mark.django_db


def test_the_recover_scope_is_checked_before_the_command(tenancy, issue_token):
    state = states.task_unknown_state(tenancy)
    reader = identity_of_credential(issue_token(scopes=[Scope.READ, Scope.CONTROL, Scope.TASKS_WORK]).credential)
    assert_refused(lambda: rq.run(task_review, reader, state, {"junk": 1}), "PERMISSION_DENIED")


def test_the_command_is_validated_before_idempotency(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    rq.run(task_review, recoverer, state, rq.review(state), key="k")
    bad = rq.review(state, reason="")
    assert_refused(lambda: rq.run(task_review, recoverer, state, bad, key="k"), "INVALID_ARGUMENT", field="reason")


def test_same_key_and_command_replays_the_first_frozen_receipt(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    first = rq.run(task_review, recoverer, state, command, key="k")
    before = history_digest()
    again = rq.run(task_review, recoverer, state, command, key="k")
    assert again.replayed and not first.replayed
    assert again.text == first.text and dict(again.data) == dict(first.data) and again.status == first.status
    assert history_digest() == before


def test_same_key_with_another_command_is_already_exists_even_after_the_instance_moved(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    rq.run(task_review, recoverer, state, rq.review(state), key="k")
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    other = rq.continue_(state)
    assert_refused(lambda: rq.run(instance_continue, recoverer, state, other, key="k"), "ALREADY_EXISTS")


def test_a_new_key_with_a_stale_revision_is_aborted_while_the_original_key_still_replays(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    first = rq.run(task_review, recoverer, state, command, key="k")
    states.reviewed_record_consume(state)
    assert_refused(lambda: rq.run(task_review, recoverer, state, command, key="k2"), "ABORTED")
    assert rq.run(task_review, recoverer, state, command, key="k").text == first.text


def test_a_replay_rechecks_access_to_every_queue_of_the_definition(tenancy, recoverer, issue_token):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    rq.run(task_review, recoverer, state, command, key="k")
    narrowed = Identity(
        namespace_id=recoverer.namespace_id,
        actor_id=recoverer.actor_id,
        scopes=recoverer.scopes,
        queues=frozenset({"ledger"}),
        credential_id=recoverer.credential_id,
    )
    assert_refused(lambda: rq.run(task_review, narrowed, state, command, key="k"), "NOT_FOUND")


def test_a_replay_rechecks_the_credential(tenancy, recoverer, recover_token):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    rq.run(task_review, recoverer, state, command, key="k")
    recover_token.credential.revoked_at = clock.now()
    recover_token.credential.save()
    assert_refused(lambda: rq.run(task_review, recoverer, state, command, key="k"), "UNAUTHENTICATED")


def test_a_refused_command_leaves_nothing_and_its_key_may_be_used_again(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    revision = state.instance.revision
    stale = rq.review(state, expected_revision=str(revision - 1))
    assert_refused(lambda: rq.run(task_review, recoverer, state, stale, key="k"), "ABORTED")
    receipt = rq.run(task_review, recoverer, state, rq.review(state), key="k")
    assert not receipt.replayed and receipt.data["revision"] == str(revision + 1)


def test_an_instance_of_another_namespace_is_not_found(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    other = namespace_ensure(name="globex", application="billing", queues=["payments"])
    foreign = states.task_unknown_state(other)
    assert Namespace.objects.count() == 2
    assert_refused(lambda: rq.run(task_review, recoverer, foreign, rq.review(foreign)), "NOT_FOUND")
    assert state.instance.namespace_id == recoverer.namespace_id


def test_an_instance_behind_an_inaccessible_queue_is_not_found(tenancy, issue_token):
    state = states.task_unknown_state(tenancy)
    narrow = identity_of_credential(issue_token(scopes=[Scope.RECOVER], queues=["ledger"]).credential)
    assert_refused(lambda: rq.run(task_review, narrow, state, rq.review(state)), "NOT_FOUND")


def test_not_found_comes_before_the_review_state(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    assert_refused(
        lambda: task_review(identity=recoverer, instance_id="f" * 32, idempotency_key="k", command=command),
        "NOT_FOUND",
    )


def test_only_an_instance_in_review_is_recovered(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    WorkflowInstance.objects.filter(pk=state.instance.pk).update(state=InstanceState.RUNNING)
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "FAILED_PRECONDITION")


@pytest.mark.parametrize("inbox_state", [InboxState.PENDING, InboxState.QUARANTINED])
def test_an_unconsumed_or_quarantined_inbox_record_blocks_every_new_decision(tenancy, recoverer, inbox_state):
    state = states.task_unknown_state(tenancy)
    InboxRecord.objects.create(
        instance=state.instance, source_kind=InboxSource.SIGNAL, source_id="e" * 32, state=inbox_state
    )
    assert_refused(lambda: rq.run(task_review, recoverer, state, rq.review(state)), "FAILED_PRECONDITION")


def test_the_inbox_is_checked_before_references(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    InboxRecord.objects.create(instance=state.instance, source_kind=InboxSource.SIGNAL, source_id="e" * 32)
    command = rq.review(state, task_id="f" * 32)
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "FAILED_PRECONDITION")


@pytest.mark.parametrize(
    ("build", "service", "override"),
    [
        (rq.review, task_review, {"task_id": "f" * 32}),
        (rq.retry, step_retry, {"step_key": "nosuchstep"}),
        (rq.retry, step_retry, {"activation_id": "f" * 32}),
    ],
)
def test_unknown_references_are_not_found_before_stale_revisions(tenancy, recoverer, build, service, override):
    state = states.task_failed_state(tenancy) if service is step_retry else states.task_unknown_state(tenancy)
    command = build(state, expected_revision="2", **override)
    assert_refused(lambda: rq.run(service, recoverer, state, command), "NOT_FOUND")


def test_an_activation_of_another_step_is_not_found(tenancy, recoverer):
    # The other step runs alongside: its activation is ACTIVE while "charge" is in review.
    state = states.task_failed_state(tenancy, steps=[states.TASK_STEP, states.NEXT_STEP | {"after": []}])
    command = rq.retry(state, activation_id=state.steps["ship"].current_activation_id)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "NOT_FOUND")


@pytest.mark.parametrize("field", ["expected_revision", "expected_step_revision"])
def test_stale_revisions_are_aborted(tenancy, recoverer, field):
    state = states.task_failed_state(tenancy)
    command = rq.retry(state, **{field: "1"})
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "ABORTED")


def test_a_stale_task_revision_is_aborted(tenancy, recoverer):
    state = states.task_unknown_state(tenancy)
    command = rq.review(state, expected_task_revision="1")
    assert_refused(lambda: rq.run(task_review, recoverer, state, command), "ABORTED")


def test_an_activation_that_is_no_longer_current_is_aborted(tenancy, recoverer):
    state = states.task_retried_state(tenancy)
    command = rq.retry(state, activation_id=state.activations[0].id)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "ABORTED")


def test_stale_revisions_are_aborted_before_corruption_is_reported(tenancy, recoverer):
    state = states.task_failed_state(tenancy)
    Activation.objects.filter(pk=state.activation.pk).update(task=None)
    command = rq.retry(state, expected_revision="2")
    assert_refused(lambda: rq.run(step_retry, recoverer, state, command), "ABORTED")


def test_broken_ownership_is_unavailable_before_the_operation_rules(tenancy, recoverer):
    state = states.task_failed_state(tenancy, stop_kind="CANCEL")
    Activation.objects.filter(pk=state.activation.pk).update(task=None)
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "UNAVAILABLE")


def test_the_quota_is_checked_last(tenancy, recoverer):
    state = states.task_failed_state(tenancy, stop_kind="CANCEL")
    state.application.max_active_tasks = 0
    state.application.save()
    assert_refused(lambda: rq.run(step_retry, recoverer, state, rq.retry(state)), "FAILED_PRECONDITION")


def test_every_success_bumps_revision_and_control_revision_by_one(tenancy, recoverer):
    state = states.task_reviewed_state(tenancy)
    for service, build in ((step_resolve, rq.resolve), (instance_continue, rq.continue_)):
        instance = WorkflowInstance.objects.get(pk=state.instance.pk)
        receipt = rq.run(service, recoverer, state, build(state), key=service.__name__)
        after = WorkflowInstance.objects.get(pk=state.instance.pk)
        assert (after.revision, after.control_revision) == (instance.revision + 1, instance.control_revision + 1)
        assert receipt.data["revision"] == str(after.revision)
        assert receipt.data["control_revision"] == str(after.control_revision)
    assert state.operations().count() == 2
