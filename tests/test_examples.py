"""The runnable examples, against a live server, with the background run in-process between polls."""

import importlib.util
from pathlib import Path

import pytest

from engine.demo import TASKS, demo_run
from engine.handlers import claim_execute
from engine.runner import runner_settle
from engine.worker import task_claim
from history.credentials import credential_issue, identity_of_credential
from history.models import Namespace, Scope, Signal, Wait

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
