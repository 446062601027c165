"""``weave_demo``: a demo namespace whose instances reach each scenario through the engine's own paths.

Nothing is set by hand: instances are started by ``instance_start``, tasks are claimed and
completed through the worker protocol (the demo acts as the worker and runs the demo
handlers), leases expire because the one clock moves past them, and the runner's passes do
the rest. The demo runs with the clock moved into the past and advances it toward the real
time, so no stored timestamp lies in the future and a real runner started afterwards finds
nothing due in these scenarios.
"""

import datetime as dt

from core import clock, exactjson
from core.identity import Identity
from engine.definitions import definition_create
from engine.handlers import claim_execute
from engine.instances import instance_cancel, instance_pause, instance_start
from engine.runner import runner_settle
from engine.signals import signal_accept
from engine.worker import Claim, task_claim
from history.models import Namespace, Scope, Step, Task, WorkflowInstance
from history.tenancy import actor_id_for, namespace_ensure

TASKS, POLLS = "demo-tasks", "demo-polls"
WEEK = 7 * 24 * 3600
LEASE = 30
START_OFFSET = dt.timedelta(hours=-6)
MAPPING = {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING", "failed": "FAILED"}}

# Each scenario's state when the demo ends (README and tests hold it to this).
SCENARIOS = {
    "task_unknown": "lease expired: task NEEDS_REVIEW (permit held, attempt UNKNOWN), step and instance NEEDS_REVIEW",
    "task_failed_budget_left": "TASK failed on attempt 1 of 3: task, activation and step FAILED, instance NEEDS_REVIEW",
    "poll_request_failed": "POLL query failed on attempt 1 of 2: activation and step FAILED, instance NEEDS_REVIEW",
    "poll_exhausted": "POLL answered PENDING in both of its 2 rounds: activation NEEDS_REVIEW, used_rounds 2",
    "cancel_unknown": "cancelled while its task ran, then the lease expired: NEEDS_REVIEW with stop_kind CANCEL",
    "signal_rearm": "SIGNAL payload broke the contract before the deadline: wait, step, instance NEEDS_REVIEW",
    "poll_pending_review": "POLL round 1 PENDING, round-2 query UNKNOWN: activation NEEDS_REVIEW (ReviewTask is next)",
    "expired_in_review": "in review (TASK failed) when its deadline passed: nothing recorded, still NEEDS_REVIEW",
    "paused": "RUNNING and paused: gate closed, its task QUEUED and unclaimable",
    "parallel_job_done": "prepare → two SIGNAL waits won by signals (one buffered early) → join: SUCCEEDED",
}


def _task_step(key: str, handler: str, **extra) -> dict:
    return {"key": key, "kind": "TASK", "handler": handler, "queue": TASKS, "deadline_seconds": WEEK, **extra}


def _poll_step(handler: str, **extra) -> dict:
    return {
        "key": "settle",
        "kind": "POLL",
        "handler": handler,
        "queue": POLLS,
        "max_rounds": 3,
        "attempts_per_round": 2,
        "interval_seconds": 60,
        "poll_deadline_seconds": WEEK,
        "round_deadline_seconds": WEEK,
        "mapping": MAPPING,
        **extra,
    }


def _signal_step(key: str, name: str, **extra) -> dict:
    return {
        "key": key,
        "kind": "SIGNAL",
        "name": name,
        "payload_version": "v1",
        "correlation": "business_key",
        "deadline_seconds": 30 * 24 * 3600,
        **extra,
    }


DEFINITIONS = {
    "demo-task-hang": [_task_step("charge", "demo.hang", max_attempts=3)],
    "demo-task-fail": [_task_step("charge", "demo.fail", max_attempts=3)],
    "demo-poll-fail": [_poll_step("demo.fail")],
    "demo-poll-pending": [_poll_step("demo.poll_pending", max_rounds=2)],
    "demo-poll-review": [_poll_step("demo.poll_pending", max_rounds=3)],
    "demo-approval": [
        _signal_step(
            "approve",
            "approval",
            contract={"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}}},
        )
    ],
    "demo-echo": [_task_step("charge", "demo.echo")],
    "demo-parallel-job": [
        _task_step("prepare", "demo.echo"),
        _signal_step("left", "left-done", after=["prepare"]),
        _signal_step("right", "right-done", after=["prepare"]),
        _task_step("join", "demo.echo", after=["left", "right"]),
    ],
}


class _Demo:
    def __init__(self, namespace_name: str) -> None:
        namespace, application, _ = namespace_ensure(name=namespace_name, application="demo-app", queues=[TASKS, POLLS])
        self.namespace = namespace
        self.identity = Identity(
            namespace_id=namespace.id,
            actor_id=actor_id_for(namespace_name, "weave_demo"),
            scopes=frozenset(Scope.values),
            queues=None,
            application_id=application.id,
        )
        self.definitions = {
            name: definition_create(
                namespace_id=namespace.id,
                document={"name": name, "application": "demo-app", "steps": steps, "deadline_seconds": WEEK},
            )
            for name, steps in DEFINITIONS.items()
        }
        self.keys = 0

    def key(self, kind: str) -> str:
        self.keys += 1
        return f"weave-demo-{kind}-{self.keys}"

    def start(self, definition: str, input_value, *, business_key: str = "", **extra) -> WorkflowInstance:
        command = {"definition": definition, "input": input_value, "business_key": business_key, **extra}
        receipt = instance_start(identity=self.identity, command=command, idempotency_key=self.key("start"))
        instance = WorkflowInstance.objects.get(pk=exactjson.loads(receipt.text)["id"])
        runner_settle()
        return instance

    def claim(self, instance: WorkflowInstance, queue: str) -> Claim:
        claim = task_claim(
            identity=self.identity, queue_name=queue, command={"worker": "weave_demo", "lease_seconds": LEASE}
        )
        if claim is None or claim.task.source_instance_id != instance.id:
            raise RuntimeError(f"the demo expected a claimable task of instance {instance.id} on {queue}")
        return claim

    def run(self, instance: WorkflowInstance, queue: str) -> Claim:
        claim = self.claim(instance, queue)
        claim_execute(identity=self.identity, claim=claim, lease_seconds=LEASE)
        runner_settle()
        return claim

    def expire_lease(self) -> None:
        clock.advance(dt.timedelta(seconds=LEASE + 1))
        runner_settle()

    def signal(self, instance: WorkflowInstance, step_key: str, name: str, payload, correlation_key: str) -> None:
        command = {
            "name": name,
            "payload_version": "v1",
            "payload": payload,
            "correlation_key": correlation_key,
            "target_step_key": step_key,
            "reason": "weave_demo: the awaited event happened",
            "evidence_ref": f"demo:{step_key}",
        }
        signal_accept(identity=self.identity, instance_id=instance.id, command=command, idempotency_key=self.key("sig"))
        runner_settle()

    def control(self, service, instance: WorkflowInstance, reason: str) -> None:
        instance.refresh_from_db()
        service(
            identity=self.identity,
            instance_id=instance.id,
            command={"expected_control_revision": str(instance.control_revision), "reason": reason},
        )
        runner_settle()


def _entry(instance: WorkflowInstance, step_key: str, task: Task | None = None) -> dict:
    step = Step.objects.get(instance=instance, key=step_key)
    entry = {"instance_id": instance.id, "step_key": step_key}
    if task is not None:
        entry["task_id"] = task.id
    if step.current_activation_id:
        entry["activation_id"] = step.current_activation_id
    return entry


def _free_namespace_name(wanted: str) -> str:
    name, number = wanted, 1
    while Namespace.objects.filter(name=name).exists():
        number += 1
        name = f"{wanted}-{number}"
    return name


def demo_run(*, namespace: str = "demo") -> dict:
    """Create the demo namespace, its definitions and one instance per scenario; returns their ids.

    ``{"namespace": name, "scenarios": {name: {instance_id, step_key, task_id?, activation_id?}}}``.
    A namespace that already exists gets a numbered sibling (``demo-2``) so each run is fresh.
    """
    clock.set_offset(START_OFFSET)
    try:
        demo = _Demo(_free_namespace_name(namespace))
        scenarios: dict[str, dict] = {}

        instance = demo.start("demo-task-hang", {"payment": "p-1", "amount": exactjson.Number("10.50")})
        claim = demo.claim(instance, TASKS)
        demo.expire_lease()
        scenarios["task_unknown"] = _entry(instance, "charge", claim.task)

        instance = demo.start("demo-task-fail", {"payment": "p-2"})
        claim = demo.run(instance, TASKS)
        scenarios["task_failed_budget_left"] = _entry(instance, "charge", claim.task)

        instance = demo.start("demo-poll-fail", {"transfer": "t-1"})
        claim = demo.run(instance, POLLS)
        scenarios["poll_request_failed"] = _entry(instance, "settle", claim.task)

        instance = demo.start("demo-poll-pending", {"transfer": "t-2", "pending_rounds": 5})
        demo.run(instance, POLLS)
        clock.advance(dt.timedelta(seconds=61))
        runner_settle()
        claim = demo.run(instance, POLLS)
        scenarios["poll_exhausted"] = _entry(instance, "settle", claim.task)

        instance = demo.start("demo-task-hang", {"payment": "p-3"})
        claim = demo.claim(instance, TASKS)
        demo.control(instance_cancel, instance, "weave_demo: the customer withdrew the order")
        demo.expire_lease()
        scenarios["cancel_unknown"] = _entry(instance, "charge", claim.task)

        instance = demo.start("demo-approval", {"order": "o-1"}, business_key="order-1")
        demo.signal(instance, "approve", "approval", {"approved": "yes"}, "order-1")
        scenarios["signal_rearm"] = _entry(instance, "approve")

        instance = demo.start("demo-poll-review", {"transfer": "t-3", "pending_rounds": 2})
        demo.run(instance, POLLS)
        clock.advance(dt.timedelta(seconds=61))
        runner_settle()
        claim = demo.claim(instance, POLLS)  # round 2: the query hangs and its lease expires
        demo.expire_lease()
        scenarios["poll_pending_review"] = _entry(instance, "settle", claim.task)

        instance = demo.start("demo-task-fail", {"payment": "p-4"}, deadline_seconds=3600)
        claim = demo.run(instance, TASKS)
        clock.advance(dt.timedelta(hours=1, minutes=1))
        runner_settle()
        scenarios["expired_in_review"] = _entry(instance, "charge", claim.task)

        instance = demo.start("demo-parallel-job", {"job": "j-1"}, business_key="job-1")
        demo.signal(instance, "right", "right-done", {"rows": 20}, "job-1")  # early: buffered
        demo.run(instance, TASKS)
        demo.signal(instance, "left", "left-done", {"rows": 10}, "job-1")
        demo.run(instance, TASKS)
        scenarios["parallel_job_done"] = _entry(instance, "join")

        instance = demo.start("demo-echo", {"payment": "p-5"})
        demo.control(instance_pause, instance, "weave_demo: paused for maintenance")
        task = Task.objects.get(source_instance_id=instance.id)
        scenarios["paused"] = _entry(instance, "charge", task)
        return {"namespace": demo.namespace.name, "scenarios": scenarios}
    finally:
        clock.set_offset(dt.timedelta(0))
