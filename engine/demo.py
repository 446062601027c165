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
from engine.signaling import signal_accept
from engine.worker import Claim, task_claim
from history.models import Namespace, Scope, Step, Task, WorkflowInstance
from history.tenancy import actor_id_for, namespace_ensure

TASKS, POLLS = "demo-tasks", "demo-polls"
WEEK = 7 * 24 * 3600
LEASE = 30
START_OFFSET = dt.timedelta(hours=-6)
MAPPING = {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING", "failed": "FAILED"}}

# Each scenario's state when the demo ends (docs/getting-started.md and the tests hold it to this).
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


# The step each scenario is about; the scenarios without a task in their entry.
SCENARIO_STEPS = {
    "task_unknown": "charge",
    "task_failed_budget_left": "charge",
    "poll_request_failed": "settle",
    "poll_exhausted": "settle",
    "cancel_unknown": "charge",
    "signal_rearm": "approve",
    "poll_pending_review": "settle",
    "expired_in_review": "charge",
    "parallel_job_done": "join",
    "paused": "charge",
}
TASKLESS = {"signal_rearm", "parallel_job_done"}


def _entry(instance: WorkflowInstance, scenario: str) -> dict:
    """A scenario's ids: its instance (whose business key names the scenario), step, activation, latest task."""
    step = Step.objects.get(instance=instance, key=SCENARIO_STEPS[scenario])
    entry = {"instance_id": instance.id, "step_key": step.key}
    if step.current_activation_id:
        if scenario not in TASKLESS:
            task = Task.objects.filter(source_activation_id=step.current_activation_id).order_by("-created_at", "-id")
            entry["task_id"] = task.values_list("id", flat=True).first()
        entry["activation_id"] = step.current_activation_id
    return entry


def demo_existing(*, namespace: str = "demo") -> dict | None:
    """The scenarios an earlier run seeded in ``namespace``, as ``demo_run`` returns them; None if it holds none."""
    found = Namespace.objects.filter(name=namespace).values_list("id", flat=True).first()
    instances = {
        instance.business_key: instance
        for instance in WorkflowInstance.objects.filter(namespace_id=found, business_key__in=SCENARIOS)
    }
    if found is None or set(instances) != set(SCENARIOS):
        return None
    return {"namespace": namespace, "scenarios": {name: _entry(instances[name], name) for name in SCENARIOS}}


def _free_namespace_name(wanted: str) -> str:
    name, number = wanted, 1
    while Namespace.objects.filter(name=name).exists():
        number += 1
        name = f"{wanted}-{number}"
    return name


def demo_run(*, namespace: str = "demo") -> dict:
    """Create the demo namespace, its definitions and one instance per scenario; returns their ids.

    ``{"namespace": name, "scenarios": {name: {instance_id, step_key, task_id?, activation_id?}}}``.
    A namespace that already exists gets a numbered sibling (``demo-2``) so each run is fresh. Each
    instance's business key is its scenario's name, which is how ``demo_existing`` finds them again.
    """
    clock.set_offset(START_OFFSET)
    try:
        demo = _Demo(_free_namespace_name(namespace))
        scenarios: dict[str, dict] = {}

        instance = demo.start(
            "demo-task-hang", {"payment": "p-1", "amount": exactjson.Number("10.50")}, business_key="task_unknown"
        )
        demo.claim(instance, TASKS)
        demo.expire_lease()
        scenarios["task_unknown"] = _entry(instance, "task_unknown")

        instance = demo.start("demo-task-fail", {"payment": "p-2"}, business_key="task_failed_budget_left")
        demo.run(instance, TASKS)
        scenarios["task_failed_budget_left"] = _entry(instance, "task_failed_budget_left")

        instance = demo.start("demo-poll-fail", {"transfer": "t-1"}, business_key="poll_request_failed")
        demo.run(instance, POLLS)
        scenarios["poll_request_failed"] = _entry(instance, "poll_request_failed")

        instance = demo.start(
            "demo-poll-pending", {"transfer": "t-2", "pending_rounds": 5}, business_key="poll_exhausted"
        )
        demo.run(instance, POLLS)
        clock.advance(dt.timedelta(seconds=61))
        runner_settle()
        demo.run(instance, POLLS)
        scenarios["poll_exhausted"] = _entry(instance, "poll_exhausted")

        instance = demo.start("demo-task-hang", {"payment": "p-3"}, business_key="cancel_unknown")
        demo.claim(instance, TASKS)
        demo.control(instance_cancel, instance, "weave_demo: the customer withdrew the order")
        demo.expire_lease()
        scenarios["cancel_unknown"] = _entry(instance, "cancel_unknown")

        instance = demo.start("demo-approval", {"order": "o-1"}, business_key="signal_rearm")
        demo.signal(instance, "approve", "approval", {"approved": "yes"}, "signal_rearm")
        scenarios["signal_rearm"] = _entry(instance, "signal_rearm")

        instance = demo.start(
            "demo-poll-review", {"transfer": "t-3", "pending_rounds": 2}, business_key="poll_pending_review"
        )
        demo.run(instance, POLLS)
        clock.advance(dt.timedelta(seconds=61))
        runner_settle()
        demo.claim(instance, POLLS)  # round 2: the query hangs and its lease expires
        demo.expire_lease()
        scenarios["poll_pending_review"] = _entry(instance, "poll_pending_review")

        instance = demo.start(
            "demo-task-fail", {"payment": "p-4"}, deadline_seconds=3600, business_key="expired_in_review"
        )
        demo.run(instance, TASKS)
        clock.advance(dt.timedelta(hours=1, minutes=1))
        runner_settle()
        scenarios["expired_in_review"] = _entry(instance, "expired_in_review")

        instance = demo.start("demo-parallel-job", {"job": "j-1"}, business_key="parallel_job_done")
        demo.signal(instance, "right", "right-done", {"rows": 20}, "parallel_job_done")  # early: buffered
        demo.run(instance, TASKS)
        demo.signal(instance, "left", "left-done", {"rows": 10}, "parallel_job_done")
        demo.run(instance, TASKS)
        scenarios["parallel_job_done"] = _entry(instance, "parallel_job_done")

        instance = demo.start("demo-echo", {"payment": "p-5"}, business_key="paused")
        demo.control(instance_pause, instance, "weave_demo: paused for maintenance")
        scenarios["paused"] = _entry(instance, "paused")
        return {"namespace": demo.namespace.name, "scenarios": scenarios}
    finally:
        clock.set_offset(dt.timedelta(0))
