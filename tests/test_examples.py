"""The runnable examples, against a live server, with the background run in-process between polls."""

import importlib.util
from pathlib import Path

import pytest

from engine.demo import TASKS, demo_run
from engine.handlers import claim_execute
from engine.runner import runner_settle
from engine.worker import task_claim
from history.credentials import credential_issue, identity_of_credential
from history.models import InstanceEvent, InstanceState, Namespace, Scope, Signal, Wait, WorkflowInstance

pytestmark = pytest.mark.django_db(transaction=True)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_parallel_job_example_cross_checks_every_winner(live_server):
    from weave_sdk import WeaveClient

    namespace = Namespace.objects.get(name=demo_run(namespace="demo")["namespace"])
    issued = credential_issue(
        namespace_id=namespace.id,
        application_id=None,
        actor_id="e" * 32,
        label="example",
        scopes=[Scope.READ, Scope.WRITE, Scope.TASKS_WORK],
        queue_access="*",
    )
    worker = identity_of_credential(issued.credential)

    def background():
        runner_settle()
        claim = task_claim(identity=worker, queue_name=TASKS, command={"worker": "example", "lease_seconds": 30})
        if claim is not None:
            claim_execute(identity=worker, claim=claim)
        runner_settle()

    with WeaveClient(live_server.url, issued.token) as client:
        winners = _example("parallel_job").parallel_job(client, settle=background, timeout=30)
    assert set(winners) == {"left", "right"}
    for wait_id, signal_id in winners.values():
        assert Wait.objects.get(id=wait_id).winner_signal_id == signal_id
        assert Signal.objects.get(id=signal_id).consumed_wait_id == wait_id


def test_the_review_queue_example_lists_every_instance_in_review_by_cause_with_its_last_events(live_server):
    from weave_sdk import WeaveClient

    namespace = Namespace.objects.get(name=demo_run(namespace="demo")["namespace"])
    issued = credential_issue(
        namespace_id=namespace.id,
        application_id=None,
        actor_id="e" * 32,
        label="example",
        scopes=[Scope.READ],
        queue_access="*",
    )
    in_review = WorkflowInstance.objects.filter(namespace=namespace, state=InstanceState.NEEDS_REVIEW)
    example = _example("review_queue")
    with WeaveClient(live_server.url, issued.token) as client:
        queue = example.review_queue(client)
    listed = {entry.instance.id: cause for cause, entries in queue.items() for entry in entries}
    assert listed == dict(in_review.values_list("id", "review_cause")) and len(listed) >= 5
    for entries in queue.values():
        since = [entry.instance.review_since for entry in entries]
        assert since == sorted(since, reverse=True)
        for entry in entries:
            stored = InstanceEvent.objects.filter(instance_id=entry.instance.id).order_by("-sequence")
            assert [e.sequence for e in entry.events] == [e.sequence for e in stored[: example.EVENTS_SHOWN]]
    lines = list(example.report(queue))
    assert all(any(instance_id in line for line in lines) for instance_id in listed)
