"""States the tests and the benches start from, reached through the engine's own transitions.

Nothing here writes a row but the section "rows written directly", which says why: instances are
started by ``instance_start``, tasks are claimed and completed through the worker protocol, leases
expire because the one clock moves past them, the runner's passes do the rest, and operator
decisions go through the recovery operations, as ``weave_demo`` builds its scenarios. Review states
are built with the clock moved into the past and put back afterwards, so a test sees the state as
the engine left it a few minutes ago and the clock at the time the test started.
"""

import datetime as dt
import hashlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from core import clock, exactjson
from core.ids import ROOT_STEP_KEY, new_id
from engine import runner
from engine.check import invariants_check
from engine.inbox import inbox_consume_next
from engine.instances import instance_cancel, instance_pause
from engine.signaling import signal_accept
from engine.worker import task_claim, task_claim_batch, task_complete
from history.models import (
    Activation,
    ActivationState,
    Application,
    Attempt,
    AttemptState,
    Disposition,
    Gate,
    IdempotencyReceipt,
    InboxRecord,
    InboxSource,
    InboxState,
    InstanceState,
    Queue,
    ResultEvent,
    ResultKind,
    ReviewCause,
    Signal,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
    Wait,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowOperation,
)
from recovery.operations import instance_continue, step_resolve, step_retry, task_review
from testkit.driver import Engine, poll_step, task_step

HOUR = dt.timedelta(hours=1)

# ---- items due for one runner pass ------------------------------------------------------------

TIMER = {"key": "t", "kind": "TIMER", "duration_seconds": 10}
SIGNAL = {"key": "s", "kind": "SIGNAL", "name": "go", "payload_version": "1", "deadline_seconds": 10}
TASKS = [task_step("a")]


def started(engine, n=1, steps=TASKS, input=None, **definition):
    """``n`` new instances of a new definition; their root continuations are pending."""
    made = engine.define(steps, **definition)
    return [engine.start(made, input) for _ in range(n)]


def results_pending(engine, n=1, steps=TASKS, input=None, queue="payments"):
    """``n`` first tasks worked by their handler: their result records are pending in the inbox."""
    instances = started(engine, n, steps, input)
    runner.runner_settle()
    for _ in range(n):
        engine.work(queue)
    return instances


def leases_expired(engine, n=1):
    """``n`` RUNNING attempts whose lease has passed."""
    started(engine, n, TASKS)
    runner.runner_settle()
    for _ in range(n):
        engine.claim(lease_seconds=1)
    clock.advance(dt.timedelta(seconds=2))


def unknown_fleet(engine, n: int) -> list:
    """``n`` instances of a new definition (one TASK step, ``charge``) in review, each task's only attempt UNKNOWN:
    started an hour ago, claimed in batches, their leases expired. The queue's and the application's quotas are
    raised to hold every task at once."""
    Queue.objects.filter(namespace=engine.namespace).update(max_active_tasks=n)
    Application.objects.filter(pk=engine.application.pk).update(max_active_tasks=n)
    with clock.moved(-dt.timedelta(hours=1)):
        instances = started(engine, n, [task_step("charge")])
        runner.runner_settle()
        command = {"worker": "w", "lease_seconds": 30}
        while task_claim_batch(identity=engine.identity, queue_name="payments", command=command, limit=50):
            pass
    runner.pass_lease_expiry()
    runner.runner_settle()
    return instances


def poll_rounds_due(engine, n=1, **poll):
    """``n`` POLL activations answered PENDING whose next round is due."""
    results_pending(engine, n, [poll_step(**poll)], {"pending_rounds": 5}, queue="polls")
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=61))


def timers_due(engine, n=1, **timer):
    """``n`` TIMER waits past their fire time."""
    started(engine, n, [{**TIMER, **timer}])
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=11))


def signals_sent(engine, n=1, steps=(SIGNAL,), **command):
    """``n`` accepted signals (``go`` version 1 unless ``command`` says otherwise), their records pending."""
    instances = started(engine, n, list(steps))
    runner.runner_settle()
    for instance in instances:
        signal_accept(
            identity=engine.identity,
            instance_id=instance.id,
            command={"name": "go", "payload_version": "1", "payload": {}, "correlation_key": "", "reason": "r"}
            | command,
            idempotency_key=f"sig-{instance.id}",
        )
    return instances


def waits_late(engine, n=1):
    """``n`` signal waits past their deadline."""
    started(engine, n, [SIGNAL])
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=11))


def instances_late(engine, n=1):
    """``n`` RUNNING instances past their instance deadline."""
    started(engine, n, TASKS, deadline_seconds=5)
    runner.runner_settle()
    clock.advance(dt.timedelta(seconds=6))


def _control(engine, service, instance, reason="maintenance window"):
    instance.refresh_from_db()
    service(
        identity=engine.identity,
        instance_id=instance.id,
        command={"expected_control_revision": str(instance.control_revision), "reason": reason},
    )


def instances_cancelled(engine, n=1):
    """``n`` CANCELLING instances, each with a queued task to cancel."""
    instances = started(engine, n, TASKS)
    runner.runner_settle()
    for instance in instances:
        _control(engine, instance_cancel, instance)
    return instances


# ---- instances in review ----------------------------------------------------------------------

QUEUE = "payments"
LEASE = 30
TASK_STEP = {
    "key": "charge",
    "kind": "TASK",
    "handler": "charge_card",
    "queue": QUEUE,
    "priority": 5,
    "max_attempts": 3,
    "deadline_seconds": 7200,
    "latest_start_seconds": 3600,
    "contract": {"type": "object", "required": ["paid"], "properties": {"paid": {"type": "boolean"}}},
}
NEXT_STEP = {"key": "ship", "kind": "TASK", "after": ["charge"], "handler": "ship", "queue": QUEUE, "max_attempts": 1}
POLL_STEP = {
    "key": "settle",
    "kind": "POLL",
    "handler": "check_settlement",
    "queue": QUEUE,
    "priority": 0,
    "max_rounds": 3,
    "attempts_per_round": 2,
    "interval_seconds": 60,
    "poll_deadline_seconds": 7200,
    "round_deadline_seconds": 3600,
    "mapping": {"field": "status", "values": {"DONE": "SUCCEEDED", "REJECTED": "FAILED", "WAITING": "PENDING"}},
    "contract": {"type": "object", "required": ["status"]},
}
PENDING_ANSWER = '{"status":"WAITING"}'
# Amounts in whole cents: 19.99 and 0.07 keep this contract, 0.30000000000000001 breaks it.
MONEY = exactjson.loads('{"type":"object","properties":{"amount":{"type":"number","multipleOf":0.01}}}')
INPUT = exactjson.loads('{"order":"A-1","amount":1.10}')
# Far enough back for every lease and interval a builder waits out, well inside every deadline.
BUILT_AGO = dt.timedelta(minutes=10)
_names = itertools.count(1)


@dataclass
class State:
    application: Application
    queue: Queue
    definition: WorkflowDefinition
    instance: WorkflowInstance
    steps: dict[str, Step]
    activations: list[Activation] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    wait: Wait | None = None
    signals: list[Signal] = field(default_factory=list)
    reviewed_event: ResultEvent | None = None
    # The audit rows and receipts the engine wrote while building the state (its start, controls, decisions).
    built_operations: frozenset[str] = frozenset()
    built_receipts: frozenset[str] = frozenset()

    @property
    def step(self) -> Step:
        return next(s for k, s in self.steps.items() if k != ROOT_STEP_KEY)

    @property
    def activation(self) -> Activation:
        return self.activations[-1]

    @property
    def task(self) -> Task:
        return self.tasks[-1]

    def fresh(self) -> "State":
        """The same state with every row read again."""
        self.instance.refresh_from_db()
        for row in [*self.steps.values(), *self.activations, *self.tasks, self.application, self.queue]:
            row.refresh_from_db()
        if self.wait is not None:
            self.wait.refresh_from_db()
        return self

    def operations(self):
        """The instance's WorkflowOperation rows written after the state was built."""
        return WorkflowOperation.objects.filter(workflow=self.instance).exclude(id__in=self.built_operations)

    def receipts(self):
        """The instance's IdempotencyReceipt rows written after the state was built."""
        return IdempotencyReceipt.objects.filter(workflow_id=self.instance.id).exclude(id__in=self.built_receipts)


def _state_of(engine: Engine, instance: WorkflowInstance) -> State:
    instance.refresh_from_db()
    definition = instance.definition
    rows = {s.key: s for s in Step.objects.filter(instance=instance)}
    steps = {ROOT_STEP_KEY: rows[ROOT_STEP_KEY], **{s["key"]: rows[s["key"]] for s in definition.spec["steps"]}}
    return State(
        application=Application.objects.get(pk=engine.application.pk),
        queue=Queue.objects.get(namespace=engine.namespace, name=QUEUE),
        definition=definition,
        instance=instance,
        steps=steps,
        activations=list(Activation.objects.filter(instance=instance).order_by("created_at", "sequence")),
        tasks=list(Task.objects.filter(source_instance=instance).order_by("created_at", "attempt_count")),
        wait=Wait.objects.filter(instance=instance).order_by("created_at").last(),
        signals=list(Signal.objects.filter(workflow=instance).order_by("accepted_at")),
        built_operations=frozenset(WorkflowOperation.objects.filter(workflow=instance).values_list("id", flat=True)),
        built_receipts=frozenset(
            IdempotencyReceipt.objects.filter(workflow_id=instance.id).values_list("id", flat=True)
        ),
    )


@contextmanager
def _in_the_past() -> Iterator[None]:
    """Build ``BUILT_AGO`` back in time; whatever the builder waits out is taken back at the end."""
    waited = []
    real_advance = clock.advance

    def advance(delta: dt.timedelta) -> None:
        waited.append(delta)
        real_advance(delta)

    with clock.moved(-BUILT_AGO):
        try:
            yield advance
        finally:
            real_advance(-sum(waited, dt.timedelta(0)))


def _engine(tenancy) -> Engine:
    namespace, application, queues = tenancy
    return Engine(namespace, application, queues)


def _built(tenancy, build, *, paused=False, **options) -> State:
    """Run ``build(engine, wait, **options)`` back in time, then pause the instance it returns if asked;
    the state of that instance."""
    engine = _engine(tenancy)
    with _in_the_past() as wait:
        instance = build(engine, wait, **options)
        if paused:
            _control(engine, instance_pause, instance)
    return _state_of(engine, instance)


def _passes(*names: str) -> None:
    """Run only the runner passes a step of the build needs, once each, in the runner's order."""
    for name, run in runner.PASSES.items():
        if name in names:
            run()


def _started(engine: Engine, steps, deadline_seconds: int) -> WorkflowInstance:
    """A new instance whose first steps are active (tasks QUEUED, waits open); instances of the same
    shape share one definition."""
    steps = steps or [TASK_STEP]
    name = f"order-{hashlib.sha256(exact([steps, deadline_seconds]).encode()).hexdigest()[:12]}"
    made = WorkflowDefinition.objects.filter(namespace=engine.namespace, name=name).first()
    made = made or engine.define(steps, name=name, deadline_seconds=deadline_seconds)
    instance = engine.start(made, INPUT, business_key=f"order-{next(_names)}")
    _passes("continuations")
    return instance


def _claimed(engine: Engine):
    claim = task_claim(
        identity=engine.identity, queue_name=QUEUE, command={"worker": "worker-1", "lease_seconds": LEASE}
    )
    assert claim is not None, "the state expected a claimable task"
    return claim


def _answered(engine: Engine, outcome: str, result, *, retryable=False) -> None:
    """The worker claims the next task and reports ``outcome``; the runner takes the result."""
    claim = _claimed(engine)
    task_complete(
        identity=engine.identity,
        task_id=claim.task.id,
        command={"attempt_id": claim.attempt.id, "outcome": outcome, "result": result, "retryable": retryable},
    )
    _passes("inbox")


def _cancel(engine: Engine, instance: WorkflowInstance) -> None:
    _control(engine, instance_cancel, instance, "operator cancel")


def _task_unknown(engine, wait, *, steps=None, stop_kind=None) -> WorkflowInstance:
    # A FAIL stop intent comes from the instance deadline passing while the attempt runs.
    instance = _started(engine, steps, LEASE if stop_kind == "FAIL" else 4 * 3600)
    _claimed(engine)
    if stop_kind == "CANCEL":
        _cancel(engine, instance)
    wait(dt.timedelta(seconds=LEASE + 1))
    _passes("instance_deadlines", "lease_expiry", "inbox")
    return instance


def task_unknown_state(tenancy, **options) -> State:
    """The lease of the only attempt expired: task, activation and step NEEDS_REVIEW, permit kept.

    ``stop_kind`` CANCEL: cancelled while the attempt ran; FAIL: the instance deadline passed while it
    ran. Either way the review keeps the stop intent.
    """
    return _built(tenancy, _task_unknown, **options)


def cancel_unknown_state(tenancy) -> State:
    """An UNKNOWN attempt while the instance was being cancelled: review with the stop intent kept."""
    return task_unknown_state(tenancy, stop_kind="CANCEL")


def _task_failed(engine, wait, *, attempts_used=2, steps=None, stop_kind=None) -> WorkflowInstance:
    instance = _started(engine, steps, 4 * 3600)
    for number in range(1, attempts_used + 1):
        _answered(engine, "FAILED", {"error": "declined"}, retryable=number < attempts_used)
    if stop_kind == "CANCEL":  # cancelled in review: the instance stays in review with the intent
        _cancel(engine, instance)
    return instance


def task_failed_state(tenancy, **options) -> State:
    """The task failed for good on attempt ``attempts_used`` (default 2; the earlier ones retryable):
    activation and step FAILED, instance in review."""
    return _built(tenancy, _task_failed, **options)


def _instance_decision(instance: WorkflowInstance, evidence: str) -> dict:
    instance.refresh_from_db()
    return {
        "expected_revision": str(instance.revision),
        "reason": "verified with the payment provider",
        "evidence_ref": f"ticket:{evidence}",
    }


def _decision(instance: WorkflowInstance, step_key: str, evidence: str) -> dict:
    step = Step.objects.get(instance=instance, key=step_key)
    return _instance_decision(instance, evidence) | {
        "step_key": step.key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
    }


def _result(conclusion: str):
    return {"paid": True} if conclusion == "SUCCEEDED" else {"error": "declined"}


def _reviewed(engine: Engine, instance: WorkflowInstance, conclusion: str, result) -> None:
    """ReviewTask on the instance's task in review, and the engine's consumption of its REVIEWED record."""
    task = Task.objects.get(source_instance=instance, state="NEEDS_REVIEW")
    command = _instance_decision(instance, "review") | {
        "task_id": task.id,
        "expected_task_revision": str(task.revision),
        "execution_settled": True,
        "conclusion": conclusion,
        "result": result,
    }
    task_review(identity=engine.identity, instance_id=instance.id, idempotency_key=f"review-{task.id}", command=command)
    record = inbox_consume_next(instance_id=instance.id)
    assert record is not None and record.state == InboxState.CONSUMED, record


def _task_reviewed(engine, wait, *, conclusion="SUCCEEDED", **unknown) -> WorkflowInstance:
    instance = _task_unknown(engine, wait, **unknown)
    _reviewed(engine, instance, conclusion, _result(conclusion))
    return instance


def task_reviewed_state(tenancy, **options) -> State:
    """After ReviewTask (``conclusion``, SUCCEEDED by default) and the consumption of its REVIEWED event:
    the activation stays NEEDS_REVIEW."""
    state = _built(tenancy, _task_reviewed, **options)
    state.reviewed_event = ResultEvent.objects.get(task=state.task, kind="REVIEWED")
    return state


def _task_resolved(engine, wait, *, conclusion="SUCCEEDED", **unknown) -> WorkflowInstance:
    instance = _task_reviewed(engine, wait, conclusion=conclusion, **unknown)
    command = _decision(instance, TASK_STEP["key"], "resolve") | {
        "execution_settled": True,
        "conclusion": conclusion,
        "result": _result(conclusion) if conclusion == "SUCCEEDED" else "declined",
    }
    step_resolve(
        identity=engine.identity, instance_id=instance.id, idempotency_key=f"resolve-{instance.id}", command=command
    )
    return instance


def task_resolved_state(tenancy, **options) -> State:
    """After ResolveStep on a reviewed task: the step carries its conclusion; only Continue is left."""
    return _built(tenancy, _task_resolved, **options)


def _task_retried(engine, wait, *, attempts_used=(1, 1)) -> WorkflowInstance:
    first, then = attempts_used
    instance = _task_failed(engine, wait, attempts_used=first)
    retry = _decision(instance, TASK_STEP["key"], "retry") | {"safe_to_retry": True}
    step_retry(identity=engine.identity, instance_id=instance.id, idempotency_key=f"retry-{instance.id}", command=retry)
    instance_continue(
        identity=engine.identity,
        instance_id=instance.id,
        idempotency_key=f"continue-{instance.id}",
        command=_instance_decision(instance, "continue") | {"review_resolved": True},
    )
    _passes("continuations")
    for number in range(1, then + 1):
        _answered(engine, "FAILED", {"error": "declined"}, retryable=number < then)
    return instance


def task_retried_state(tenancy, **options) -> State:
    """The task failed for good, RetryStep gave the step a second task with what was left of the budget,
    Continue lifted the review and the second task failed for good too: both activations FAILED, in review.
    ``attempts_used``: the attempts of each task (the earlier ones of a task retryable)."""
    return _built(tenancy, _task_retried, **options)


def _rounds_pending(engine, wait, rounds: int) -> WorkflowInstance:
    """A POLL instance whose first ``rounds`` rounds answered PENDING; the next round is QUEUED if any is left."""
    instance = _started(engine, [POLL_STEP], 4 * 3600)
    for number in range(1, rounds + 1):
        _answered(engine, "SUCCEEDED", exactjson.loads(PENDING_ANSWER))
        if number < POLL_STEP["max_rounds"]:
            wait(dt.timedelta(seconds=POLL_STEP["interval_seconds"] + 1))
            _passes("poll_rounds")
    return instance


def _poll_round_failed(engine, wait) -> WorkflowInstance:
    instance = _rounds_pending(engine, wait, 1)
    _answered(engine, "FAILED", {"error": "503"})
    return instance


def poll_round_failed_state(tenancy, **options) -> State:
    """Round 1 answered PENDING; round 2's query failed for good on the first of its two attempts."""
    return _built(tenancy, _poll_round_failed, **options)


def poll_rounds_exhausted_state(tenancy, **options) -> State:
    """Every round answered PENDING: rounds exhausted, in review."""
    return _built(tenancy, _rounds_pending, rounds=POLL_STEP["max_rounds"], **options)


def _poll_round_unknown(engine, wait) -> WorkflowInstance:
    instance = _rounds_pending(engine, wait, 1)
    _claimed(engine)
    wait(dt.timedelta(seconds=LEASE + 1))
    _passes("lease_expiry", "inbox")
    return instance


def poll_round_unknown_state(tenancy, **options) -> State:
    """Round 1 answered PENDING; round 2's query lease expired (UNKNOWN): in review, ReviewTask is next."""
    return _built(tenancy, _poll_round_unknown, **options)


def _poll_pending_reviewed(engine, wait) -> WorkflowInstance:
    instance = _poll_round_unknown(engine, wait)
    _reviewed(engine, instance, "SUCCEEDED", exactjson.loads(PENDING_ANSWER))
    return instance


def poll_pending_reviewed_state(tenancy, **options) -> State:
    """Round 2's query was UNKNOWN, then reviewed SUCCEEDED with a PENDING answer, consumed: in review."""
    state = _built(tenancy, _poll_pending_reviewed, **options)
    state.reviewed_event = ResultEvent.objects.get(task=state.task, kind="REVIEWED")
    return state


def _task_answer_broken(engine, wait, *, step=TASK_STEP, result='{"paid":"yes"}') -> WorkflowInstance:
    instance = _started(engine, [step], 4 * 3600)
    _answered(engine, "SUCCEEDED", exactjson.loads(result))
    return instance


def result_contract_violation_state(tenancy, **options) -> State:
    """The task of ``step`` succeeded with a ``result`` (exact JSON text) that breaks the step's contract:
    activation and step in review."""
    return _built(tenancy, _task_answer_broken, **options)


def _poll_answered(engine, wait, *, answer: dict) -> WorkflowInstance:
    instance = _started(engine, [POLL_STEP], 4 * 3600)
    _answered(engine, "SUCCEEDED", answer)
    return instance


def poll_answered_state(tenancy, *, answer: dict, **options) -> State:
    """Round 1's query answered ``answer``: ``{"status": "REJECTED"}`` is classified FAILED (step FAILED),
    a status the mapping does not name is unclassified (step NEEDS_REVIEW); in review either way."""
    return _built(tenancy, _poll_answered, answer=answer, **options)


# A poll deadline a round and a half away: round 2 is still due before it, round 3 no longer.
SHORT_POLL_STEP = POLL_STEP | {"poll_deadline_seconds": 90, "round_deadline_seconds": 90}


def _poll_deadline(engine, wait, *, seen_by: str) -> WorkflowInstance:
    instance = _started(engine, [SHORT_POLL_STEP], 4 * 3600)
    _answered(engine, "SUCCEEDED", exactjson.loads(PENDING_ANSWER))
    if seen_by == "round":  # the round pass comes after the deadline: no round 2
        wait(dt.timedelta(seconds=SHORT_POLL_STEP["poll_deadline_seconds"] + 1))
        _passes("poll_rounds")
    else:  # round 2 answers PENDING: round 3 would be due after the deadline
        wait(dt.timedelta(seconds=SHORT_POLL_STEP["interval_seconds"] + 1))
        _passes("poll_rounds")
        _answered(engine, "SUCCEEDED", exactjson.loads(PENDING_ANSWER))
    return instance


def poll_deadline_state(tenancy, *, seen_by: str, **options) -> State:
    """A POLL step still PENDING at its poll deadline, ``seen_by`` the ``round`` pass (the next round came
    due after it) or the ``answer`` of round 2 (round 3 would be due after it): activation and step in review."""
    return _built(tenancy, _poll_deadline, seen_by=seen_by, **options)


# ---- SIGNAL and TIMER -------------------------------------------------------------------------

SIGNAL_STEP = {
    "key": "approval",
    "kind": "SIGNAL",
    "name": "approved",
    "payload_version": "1",
    "correlation": "input.order",
    "deadline_seconds": 7200,
    "contract": {"type": "object", "required": ["by"]},
}
TIMER_STEP = {
    "key": "cooldown",
    "kind": "TIMER",
    "duration_seconds": 300,
    "deadline_seconds": 4200,
    "max_lateness_seconds": 60,
}
FINAL_SIGNAL = {"name": "settled", "payload_version": "1", "correlation": "input.order", "deadline_seconds": 3600}


def _signalled(engine: Engine, instance: WorkflowInstance, name: str, payload) -> None:
    """A client sends signal ``name`` correlated by the order; the runner takes its record."""
    signal_accept(
        identity=engine.identity,
        instance_id=instance.id,
        command={
            "name": name,
            "payload_version": "1",
            "payload": payload,
            "correlation_key": INPUT["order"],
            "reason": "sent by the payment provider",
        },
        idempotency_key=f"signal-{new_id()}",
    )
    _passes("inbox")


def _signalled_later(engine, wait, instance: WorkflowInstance, name: str, later) -> None:
    """The signals sent while the wait is in review, a second apart (the oldest first): all buffered."""
    for payload in later:
        wait(dt.timedelta(seconds=1))
        _signalled(engine, instance, name, payload)


def _signal_violated(engine, wait, *, step=SIGNAL_STEP, later=({"by": "carol"},)) -> WorkflowInstance:
    instance = _started(engine, [step], 4 * 3600)
    _signalled(engine, instance, step["name"], {"who": 1})
    _signalled_later(engine, wait, instance, step["name"], later)
    return instance


def signal_contract_violation_state(tenancy, **options) -> State:
    """A matching signal broke the ``step``'s contract; the signals sent after it (``later``: their payloads,
    by default one that keeps the contract) are still PENDING, buffered while the wait is in review."""
    return _built(tenancy, _signal_violated, **options)


def _timer_late(engine, wait) -> WorkflowInstance:
    instance = _started(engine, [TIMER_STEP], 4 * 3600)
    wait(dt.timedelta(seconds=TIMER_STEP["duration_seconds"] + TIMER_STEP["max_lateness_seconds"] + 1))
    _passes("timers")
    return instance


def timer_late_state(tenancy, **options) -> State:
    """The runner saw the due timer past its max lateness: wait, activation and step in review."""
    return _built(tenancy, _timer_late, **options)


def _final_signal_violated(engine, wait, *, later=()) -> WorkflowInstance:
    instance = _started(engine, [POLL_STEP | {"final_signal": FINAL_SIGNAL}], 4 * 3600)
    _answered(engine, "SUCCEEDED", {"status": "DONE"})
    _signalled(engine, instance, FINAL_SIGNAL["name"], {"settled": True})
    _signalled_later(engine, wait, instance, FINAL_SIGNAL["name"], later)
    return instance


def poll_final_signal_violation_state(tenancy, **options) -> State:
    """Round 1 classified SUCCEEDED; the final signal that followed broke the contract: in review. The final
    signals sent after it (``later``: their payloads) are buffered while the wait is in review."""
    return _built(tenancy, _final_signal_violated, **options)


# A signal wait that passes its deadline while the build waits out nothing longer.
SHORT_SIGNAL_STEP = SIGNAL_STEP | {"deadline_seconds": 60}


def _wait_expired(engine, wait) -> WorkflowInstance:
    instance = _started(engine, [SHORT_SIGNAL_STEP], 4 * 3600)
    wait(dt.timedelta(seconds=SHORT_SIGNAL_STEP["deadline_seconds"] + 1))
    _passes("wait_deadlines")
    return instance


def wait_expired_state(tenancy, **options) -> State:
    """No signal came before the wait's deadline: wait EXPIRED, activation and step in review."""
    return _built(tenancy, _wait_expired, **options)


def _reviewed_twice(engine, wait) -> WorkflowInstance:
    instance = _started(engine, [TASK_STEP, SHORT_SIGNAL_STEP], 4 * 3600)
    _answered(engine, "FAILED", {"error": "declined"})
    wait(dt.timedelta(seconds=SHORT_SIGNAL_STEP["deadline_seconds"] + 1))
    _passes("wait_deadlines")
    return instance


def reviewed_twice_state(tenancy, **options) -> State:
    """The task of ``charge`` failed on its first attempt (in review), then the signal wait of the parallel
    ``approval`` passed its deadline: both steps in review, the instance once."""
    return _built(tenancy, _reviewed_twice, **options)


# ---- other instances ---------------------------------------------------------------------------

OTHERS_STEPS = [
    TASK_STEP,
    {"key": "approval", "kind": "SIGNAL", "name": "approved", "payload_version": "1", "deadline_seconds": 7200},
    {"key": "cooldown", "kind": "TIMER", "duration_seconds": 3600},
]


def instances_in_review(tenancy, n: int) -> None:
    """``n`` instances built side by side, each with its task UNKNOWN (in review) and a signal wait and a
    timer still open: all started, all claimed, one pass expires their leases and one consumes the results."""
    engine = _engine(tenancy)
    with _in_the_past() as wait:
        made = engine.define(OTHERS_STEPS, deadline_seconds=4 * 3600)
        for _ in range(n):
            engine.start(made, INPUT, business_key=f"order-{next(_names)}")
        _passes("continuations")
        for _ in range(n):
            _claimed(engine)
        wait(dt.timedelta(seconds=LEASE + 1))
        _passes("lease_expiry", "inbox")


# ---- rows written directly ---------------------------------------------------------------------
# Rows the engine cannot leave, written one by one: step histories longer than a definition allows
# (``instance_make``), chains with cancelled activations (``task_chain_state``), and a task in review
# under a step that is not (``activation_add`` and ``task_add`` next to an engine-built state).

INSTANCE_REVISION = 20


def _definition(namespace_id: str, steps: list[dict]) -> WorkflowDefinition:
    version = WorkflowDefinition.objects.filter(namespace_id=namespace_id, name="order").count() + 1
    return WorkflowDefinition.objects.create(
        namespace_id=namespace_id, name="order", version=version, spec={"steps": steps}, queues=[QUEUE]
    )


def instance_make(tenancy, steps: list[dict], cause: str = ReviewCause.TASK_FAILED_BUDGET_LEFT) -> State:
    """An instance in NEEDS_REVIEW (gate closed) with its $root step and one PENDING step per node; it entered
    review for ``cause`` about its first step."""
    namespace, application, queues = tenancy
    now = clock.now()
    definition = _definition(namespace.id, steps)
    instance = WorkflowInstance.objects.create(
        namespace=namespace,
        definition=definition,
        business_key=f"order-{new_id()[:8]}",
        state=InstanceState.NEEDS_REVIEW,
        revision=INSTANCE_REVISION,
        control_revision=7,
        input='{"order":"A-1","amount":1.10}',
        deadline_at=now + 4 * HOUR,
        review_reason="a step needs review",
        review_cause=cause,
        review_step_key=steps[0]["key"],
        review_since=now,
        created_at=now - HOUR,
    )
    Gate.objects.create(instance=instance, open=False, revision=3)
    rows = {ROOT_STEP_KEY: Step.objects.create(instance=instance, key=ROOT_STEP_KEY, kind=StepKind.ROOT)}
    for spec in steps:
        rows[spec["key"]] = Step.objects.create(instance=instance, key=spec["key"], kind=spec["kind"])
    return State(application=application, queue=queues[0], definition=definition, instance=instance, steps=rows)


def _inbox_consumed(state: State, event: ResultEvent, task: Task, disposition=Disposition.APPLIED) -> None:
    InboxRecord.objects.create(
        instance=state.instance,
        source_kind=InboxSource.RESULT_EVENT,
        source_id=event.id,
        task=task,
        activation_id=task.source_activation_id,
        state=InboxState.CONSUMED,
        disposition=disposition,
        created_at=event.created_at,
        consumed_at=event.created_at,
    )


def result_event_add(state: State, task: Task, kind: str, outcome: str = "", result: str | None = None):
    seq = ResultEvent.objects.filter(task=task).count() + 1
    event = ResultEvent.objects.create(
        task=task,
        seq=seq,
        kind=kind,
        outcome=outcome,
        result=result,
        task_revision=task.revision,
        created_at=clock.now(),
    )
    _inbox_consumed(state, event, task)
    return event


def task_add(
    state: State,
    activation: Activation,
    *,
    state_: str,
    attempts: list[str],
    max_attempts: int,
    retry_of: Task | None = None,
    result: str | None = None,
) -> Task:
    """A task of ``activation`` with its attempts; its permit is held until it is terminal."""
    spec = state.definition.step_spec(_key_of(state, activation))
    first = state.tasks[0] if state.tasks else None
    now = clock.now()
    task = Task.objects.create(
        namespace_id=state.instance.namespace_id,
        application=state.application,
        queue=state.queue,
        handler=spec["handler"],
        priority=spec.get("priority", 0),
        input=first.input if first else '{"order":"A-1","amount":1.10}',
        business_key=state.instance.business_key,
        concurrency_key="card-42",
        state=state_,
        revision=2 + len(attempts),
        attempt_count=len(attempts),
        max_attempts=max_attempts,
        deadline_at=activation.deadline_at,
        latest_start_at=activation.latest_start_at,
        retry_of=retry_of,
        source_instance=state.instance,
        source_activation=activation,
        outcome=state_ if state_ in (TaskState.SUCCEEDED, TaskState.FAILED) else "",
        result=result,
        permit_held=state_ not in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED),
        created_at=now,
        updated_at=now,
    )
    for number, attempt_state in enumerate(attempts, start=1):
        Attempt.objects.create(
            task=task,
            number=number,
            worker="worker-1",
            state=attempt_state,
            lease_expires_at=now + dt.timedelta(minutes=5),
            started_at=now,
            finished_at=now if attempt_state != AttemptState.UNKNOWN else None,
        )
    state.tasks.append(task)
    return task


def _key_of(state: State, activation: Activation) -> str:
    return next(k for k, s in state.steps.items() if s.id == activation.step_id)


def activation_add(state: State, key: str, *, state_: str, **fields) -> Activation:
    step = state.steps[key]
    now = clock.now()
    sequence = Activation.objects.filter(step=step).count() + 1
    first = next((a for a in state.activations if a.step_id == step.id), None)
    activation = Activation.objects.create(
        step=step,
        instance=state.instance,
        sequence=sequence,
        state=state_,
        revision=3,
        input=first.input if first else '{"order":"A-1"}',
        deadline_at=first.deadline_at if first else now + 2 * HOUR,
        latest_start_at=first.latest_start_at if first else now + HOUR,
        created_at=now,
        updated_at=now,
        **fields,
    )
    state.activations.append(activation)
    step.current_activation = activation
    step.state = {
        ActivationState.SUPERSEDED: step.state,
        ActivationState.ACTIVE: StepState.ACTIVE,
    }.get(state_, state_)
    step.revision += 1
    step.save()
    return activation


def quota_sync(state: State) -> State:
    """Counters equal to the permits held, as the engine keeps them."""
    for row, name in ((state.application, "application"), (state.queue, "queue")):
        row.active_tasks = Task.objects.filter(**{name: row}, permit_held=True).count()
        row.save(update_fields=["active_tasks"])
    return state


def task_chain_state(tenancy, chain: list[tuple[str, str, list[str]]]) -> State:
    """A TASK step whose activations ran ``chain``: (activation state, task state, attempt states) each.

    Every task retries its predecessor and gets what is left of max_attempts, as RetryStep makes it.
    Written row by row: the engine cancels only under a stop intent, which nothing lifts and RetryStep
    refuses, and it never writes a CANCELLED attempt.
    """
    state = instance_make(tenancy, [TASK_STEP])
    budget, spent, previous = TASK_STEP["max_attempts"], 0, None
    for index, (activation_state, task_state, attempts) in enumerate(chain):
        last = index == len(chain) - 1
        activation = activation_add(
            state, "charge", state_=activation_state if last else _settled(activation_state), task=None
        )
        task = task_add(
            state,
            activation,
            state_=task_state,
            attempts=attempts,
            max_attempts=budget - spent,
            retry_of=previous,
            result='{"error":"declined"}' if task_state == TaskState.FAILED else None,
        )
        activation.task = task
        activation.save(update_fields=["task"])
        if AttemptState.UNKNOWN in attempts:
            result_event_add(state, task, ResultKind.UNKNOWN)
        elif task_state in (TaskState.FAILED, TaskState.SUCCEEDED):
            result_event_add(state, task, ResultKind.RESULT, task_state, task.result)
        spent += len(attempts)
        previous = task
    return quota_sync(state)


def _settled(activation_state: str) -> str:
    return activation_state if activation_state in (ActivationState.FAILED, ActivationState.CANCELLED) else "SUPERSEDED"


# ---- invariants ---------------------------------------------------------------------------


def assert_invariants(state: State) -> None:
    """What the engine guarantees of every instance: ``weave_check`` finds no violation."""
    violations = invariants_check()
    assert not violations, [str(v) for v in violations]
    # Tests read the quota counters next: hand them the stored values.
    state.application.refresh_from_db()
    state.queue.refresh_from_db()


def exact(value) -> str:
    return exactjson.dumps(value)


def reviewed_record_consume(state: State) -> None:
    """The engine's inbox consumer takes the instance's pending REVIEWED record."""
    record = inbox_consume_next(instance_id=state.instance.pk)
    assert record is not None and record.state == InboxState.CONSUMED, record
