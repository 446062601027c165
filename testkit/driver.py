"""The engine driven through its own services, as the API and the commands drive it, and the step documents
the states are defined with."""

import itertools

from core import exactjson
from core.identity import Identity
from engine.definitions import definition_create
from engine.handlers import claim_execute
from engine.instances import instance_start
from engine.runner import runner_settle
from engine.worker import task_claim
from history.models import Scope, WorkflowInstance

_keys = itertools.count(1)


class Engine:
    """Drives the engine through its own services, as the API and the commands do."""

    def __init__(self, namespace, application, queues):
        self.namespace = namespace
        self.application = application
        self.queues = {q.name: q for q in queues}
        self.identity = Identity(
            namespace_id=namespace.id,
            actor_id="e" * 32,
            scopes=frozenset(Scope.values),
            queues=None,
            application_id=application.id,
        )

    def define(self, steps, **extra):
        document = {"name": extra.pop("name", f"wf{next(_keys)}"), "application": self.application.name, "steps": steps}
        document.update(extra)
        return definition_create(namespace_id=self.namespace.id, document=document)

    def start(self, definition, input=None, **command):
        command = {"definition": definition.name, "version": definition.version, "input": input or {}, **command}
        receipt = instance_start(identity=self.identity, command=command, idempotency_key=f"start-{next(_keys)}")
        return WorkflowInstance.objects.get(pk=exactjson.loads(receipt.text)["id"])

    def claim(self, queue="payments", lease_seconds=30):
        return task_claim(
            identity=self.identity, queue_name=queue, command={"worker": "w1", "lease_seconds": lease_seconds}
        )

    def work(self, queue="payments"):
        """Claim one task and run its handler; the claim, or None when nothing was claimable."""
        claim = self.claim(queue)
        if claim is not None:
            claim_execute(identity=self.identity, claim=claim)
        return claim

    def settle(self):
        return runner_settle()

    def reload(self, row):
        row.refresh_from_db()
        return row


def task_step(key="charge", **extra):
    return {"key": key, "kind": "TASK", "handler": "demo.echo", "queue": "payments", **extra}


def poll_step(**extra):
    step = {
        "key": "settle",
        "kind": "POLL",
        "handler": "demo.poll_pending",
        "queue": "polls",
        "max_rounds": 3,
        "attempts_per_round": 2,
        "interval_seconds": 60,
        "poll_deadline_seconds": 3600,
        "mapping": {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING", "failed": "FAILED"}},
    }
    step.update(extra)
    return step
