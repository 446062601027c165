"""Creating activations, tasks, poll rounds and waits: first activations and the operator's re-runs.

Every function here runs inside the caller's transaction, with the rows it changes already
locked in the fixed order; none of them bumps the instance revision (the caller does once).
"""

import datetime as dt

from core import clock, exactjson
from core.errors import InvalidArgument
from core.ids import new_id
from engine.budget import attempt_budget
from engine.commands import is_text
from engine.quota import Quota
from engine.signaling import signal_spec_of, wait_take_buffered, wait_take_foreseen
from engine.state import touch
from history.locking import LockSet
from history.models import (
    Activation,
    ActivationState,
    Application,
    Disposition,
    Gate,
    PollRound,
    Queue,
    Signal,
    Step,
    StepKind,
    StepState,
    Task,
    Wait,
    WaitKind,
    WaitState,
    WorkflowInstance,
)


def correlation_key_of(*, instance: WorkflowInstance, source: str) -> str:
    """The correlation key a wait expects: the business key or a top-level string field of the input.

    Raises InvalidArgument (field ``input.<name>``) when the input has no such string field;
    ``instance_start`` calls it for every signal step so an instance never starts uncorrelatable.
    """
    if source == "business_key":
        return instance.business_key
    name = source.removeprefix("input.")
    value = exactjson.loads(instance.input)
    if not isinstance(value, dict) or not is_text(value.get(name)):
        raise InvalidArgument(f"input.{name}: the definition correlates signals by this string field", field=source)
    return value[name]


def task_create(
    *,
    locks: LockSet,
    quota: Quota,
    instance: WorkflowInstance,
    activation: Activation,
    spec: dict,
    max_attempts: int,
    deadline_at: dt.datetime | None,
    latest_start_at: dt.datetime | None,
    source_round: int | None = None,
    retry_of: Task | None = None,
    now: dt.datetime | None = None,
) -> Task | None:
    """A QUEUED task of the activation holding a permit of the quota's application and the step's queue,
    or None when full. The task is saved; nothing is written when the quota is full.

    Its handler, priority, input and keys are the step's (the spec's handler and priority, the activation's
    input, the instance's business key, one concurrency key per step), or, for a retry, those of the task
    it retries (``retry_of``), which are checked to be the same.
    """
    if not quota.take(spec["queue"]):
        return None
    now = now or clock.now()
    if retry_of is None:
        fixed = {
            "handler": spec["handler"],
            "priority": spec["priority"],
            "input": activation.input,
            "business_key": instance.business_key,
            "concurrency_key": f"{instance.id}/{spec['key']}",
        }
    else:
        fixed = {name: getattr(retry_of, name) for name in Task.FIXED_FIELDS}
    return Task.objects.create(
        namespace_id=instance.namespace_id,
        application_id=quota.application_id,
        queue_id=quota.queue_id(spec["queue"]),
        max_attempts=max_attempts,
        deadline_at=deadline_at,
        latest_start_at=latest_start_at,
        retry_of=retry_of,
        source_instance=instance,
        source_activation=activation,
        source_round=source_round,
        permit_held=True,
        created_at=now,
        updated_at=now,
        **fixed,
    )


def poll_round_start(
    *,
    locks: LockSet,
    quota: Quota,
    instance: WorkflowInstance,
    activation: Activation,
    spec: dict,
    max_attempts: int | None = None,
    deadline_at: dt.datetime | None = None,
    retry_of: Task | None = None,
    round_number: int | None = None,
    now: dt.datetime | None = None,
) -> Task | None:
    """Open business round ``used_rounds + 1`` of a POLL activation: its query task and PollRound row.

    By default the round's task gets max_attempts = the frozen attempts_per_round and a deadline
    of now + round_deadline_seconds capped by the total query deadline; a recovery re-running
    a round passes its number, the remaining attempts, the round's original deadline and the task
    it retries. None (nothing written) when the quota is full. The caller saves the activation.
    """
    now = now or clock.now()
    round_number = round_number or (activation.used_rounds or 0) + 1
    round_deadline = deadline_at or min(
        now + dt.timedelta(seconds=spec["round_deadline_seconds"]), activation.poll_deadline_at
    )
    task = task_create(
        locks=locks,
        quota=quota,
        instance=instance,
        activation=activation,
        spec=spec,
        max_attempts=max_attempts or attempt_budget(spec=spec, activation=activation),
        deadline_at=round_deadline,
        latest_start_at=None,
        source_round=round_number,
        retry_of=retry_of,
        now=now,
    )
    if task is None:
        return None
    PollRound.objects.create(activation=activation, instance=instance, round=round_number, task=task, created_at=now)
    activation.state = ActivationState.ACTIVE
    activation.last_task = task
    activation.round_deadline_at = round_deadline
    activation.next_round_at = None
    # The new round has no classification yet; ReviewTask's REVIEWED answer may provide it.
    activation.last_round_classification = ""
    return task


def wait_create(
    *,
    instance: WorkflowInstance,
    gate: Gate,
    step: Step,
    activation: Activation,
    kind: WaitKind,
    signal_spec: dict | None,
    step_spec: dict,
    deadline_at: dt.datetime,
    fire_at: dt.datetime | None,
    now: dt.datetime,
) -> Wait:
    """A WAITING wait for an activation (SIGNAL, TIMER or a POLL's final signal); sets activation.wait.

    The step must already be WAITING on ``activation``: a signal wait takes the signal buffered for
    its step at once (``wait_take_buffered``), which may end the step or send it to review. The
    caller saves the activation.
    """
    wait = Wait.objects.create(
        instance=instance,
        step=step,
        activation=activation,
        kind=kind,
        signal_name=signal_spec["name"] if signal_spec else "",
        payload_version=signal_spec["payload_version"] if signal_spec else "",
        correlation_key=correlation_key_of(instance=instance, source=signal_spec["correlation"]) if signal_spec else "",
        deadline_at=deadline_at,
        fire_at=fire_at,
        expected_at=_expected_at(signal_spec, now, deadline_at),
        created_at=now,
        updated_at=now,
    )
    activation.wait = wait
    wait_take_buffered(
        instance=instance, gate=gate, step=step, activation=activation, wait=wait, step_spec=step_spec, now=now
    )
    return wait


def step_activate(
    *, locks: LockSet, quota: Quota, instance: WorkflowInstance, gate: Gate, step: Step, spec: dict
) -> bool:
    """Activation 1 of a PENDING step (the step must be locked); False, with nothing written, when the quota is full.

    TASK: an ACTIVE activation and its QUEUED task (deadline now + deadline_seconds, latest start,
    exact instance input, business and concurrency key). POLL: the frozen limits and round 1.
    SIGNAL / TIMER: a WAITING activation with its wait; a SIGNAL step whose signal came early takes it
    at once and may end SUCCEEDED (or in review) before this returns.
    """
    now = clock.now()
    activation = Activation(
        step=step,
        instance=instance,
        sequence=step.activation_count + 1,
        input=instance.input,
        created_at=now,
        updated_at=now,
    )
    kind = spec["kind"]
    if kind == StepKind.TASK:
        activation.deadline_at = now + dt.timedelta(seconds=spec["deadline_seconds"])
        if spec["latest_start_seconds"] is not None:
            activation.latest_start_at = now + dt.timedelta(seconds=spec["latest_start_seconds"])
        task = task_create(
            locks=locks,
            quota=quota,
            instance=instance,
            activation=activation,
            spec=spec,
            max_attempts=attempt_budget(spec=spec, activation=activation),
            deadline_at=activation.deadline_at,
            latest_start_at=activation.latest_start_at,
        )
        if task is None:
            return False
        activation.task = task
        step.state = StepState.ACTIVE
    elif kind == StepKind.POLL:
        activation.first_round = 1
        activation.first_round_attempts_used = 0
        activation.used_rounds = 0
        activation.max_rounds = spec["max_rounds"]
        activation.attempts_per_round = spec["attempts_per_round"]
        activation.interval_seconds = spec["interval_seconds"]
        activation.poll_deadline_at = now + dt.timedelta(seconds=spec["poll_deadline_seconds"])
        if poll_round_start(locks=locks, quota=quota, instance=instance, activation=activation, spec=spec) is None:
            return False
        step.state = StepState.ACTIVE
    else:
        activation.state = ActivationState.WAITING
        step.state = StepState.WAITING
    activation.save()
    step.current_activation = activation
    step.activation_count = activation.sequence
    if kind in (StepKind.SIGNAL, StepKind.TIMER):
        # Once the step names its activation: the wait may take a buffered signal and end the step (saving it).
        timer = kind == StepKind.TIMER
        wait_create(
            instance=instance,
            gate=gate,
            step=step,
            activation=activation,
            kind=WaitKind(kind),
            signal_spec=None if timer else spec,
            step_spec=spec,
            deadline_at=now + dt.timedelta(seconds=spec["deadline_seconds"]),
            fire_at=now + dt.timedelta(seconds=spec["duration_seconds"]) if timer else None,
            now=now,
        )
        activation.save()
    touch(step, now)
    return True


def _expected_at(signal_spec: dict | None, now: dt.datetime, deadline_at: dt.datetime) -> dt.datetime | None:
    """When a wait opened ``now`` expects its signal, if its spec says: ``expected_seconds`` on, not past the
    deadline (a generation re-armed late keeps the deadline it had)."""
    if signal_spec is None or "expected_seconds" not in signal_spec:
        return None
    return min(now + dt.timedelta(seconds=signal_spec["expected_seconds"]), deadline_at)


def wait_supersede(
    *,
    instance: WorkflowInstance,
    gate: Gate,
    step: Step,
    activation: Activation,
    wait: Wait,
    step_spec: dict,
    now: dt.datetime,
) -> tuple[Activation, Wait, Signal | None]:
    """Activation sequence+1 WAITING on wait generation+1 with the same contract, correlation key, deadline and
    fire_at (a deadline is never extended); the old activation and wait become SUPERSEDED, the old wait keeping
    its winner, and the step WAITING on the new activation, which keeps the POLL fields and classification
    (a POLL step's final signal). The new generation takes the oldest signal buffered for the step at once
    (``wait_take_buffered``): the step may end SUCCEEDED, or in review when the signal breaks the contract.
    Returns the new activation and wait and the signal taken, if any.

    Step, activation and wait must be locked; the caller bumps the instance.
    """
    activation_id, wait_id = new_id(), new_id()
    following = Activation.objects.create(
        id=activation_id,
        step=step,
        instance=instance,
        sequence=activation.sequence + 1,
        state=ActivationState.WAITING,
        input=activation.input,
        deadline_at=activation.deadline_at,
        latest_start_at=activation.latest_start_at,
        wait_id=wait_id,
        created_at=now,
        updated_at=now,
        last_round_classification=activation.last_round_classification,
        **_poll_fields(activation),
    )
    new_wait = Wait.objects.create(
        id=wait_id,
        instance=instance,
        step=step,
        activation=following,
        kind=wait.kind,
        generation=wait.generation + 1,
        signal_name=wait.signal_name,
        payload_version=wait.payload_version,
        correlation_key=wait.correlation_key,
        deadline_at=wait.deadline_at,
        fire_at=wait.fire_at,
        expected_at=_expected_at(signal_spec_of(step_spec), now, wait.deadline_at),
        state=WaitState.WAITING,
        created_at=now,
        updated_at=now,
    )
    touch(wait, now, state=WaitState.SUPERSEDED)
    touch(activation, now, state=ActivationState.SUPERSEDED)
    touch(step, now, state=StepState.WAITING, current_activation=following, activation_count=following.sequence)
    taken = wait_take_buffered(
        instance=instance, gate=gate, step=step, activation=following, wait=new_wait, step_spec=step_spec, now=now
    )
    return following, new_wait, taken


def wait_supersede_foreseen(
    *, step: Step, activation: Activation, wait: Wait, step_spec: dict, now: dt.datetime
) -> tuple[Signal, Disposition] | None:
    """The signal the generation ``wait_supersede`` would open now takes at once, and its disposition (APPLIED:
    the step succeeds; CONTRACT_VIOLATION: the new wait goes to review); None when it would wait. Writes nothing.

    The new generation matches as the old wait does (same instance, contract, correlation key and deadline)
    under the next activation sequence.
    """
    following = Activation(step=step, instance_id=activation.instance_id, sequence=activation.sequence + 1)
    return wait_take_foreseen(wait=wait, activation=following, step=step, step_spec=step_spec, now=now)


# The ends a re-run leaves on the old activation; any other state becomes SUPERSEDED.
_ENDS_KEPT = (ActivationState.FAILED, ActivationState.CANCELLED)


def activation_superseded_state(activation: Activation) -> str:
    """The state a re-run leaves the old activation in (``activation_retry``), for previews to show."""
    return activation.state if activation.state in _ENDS_KEPT else ActivationState.SUPERSEDED


def _poll_fields(activation: Activation) -> dict[str, object]:
    return {name: getattr(activation, name) for name in Activation.POLL_FIELDS}


def activation_retry(
    *,
    locks: LockSet,
    application: Application,
    queue: Queue,
    instance: WorkflowInstance,
    step: Step,
    spec: dict,
    current: Activation,
    first: Activation,
    previous: Task,
    original: Task,
    max_attempts: int,
    business_round: int | None,
    attempts_used: int,
    now: dt.datetime,
) -> tuple[Activation, Task] | None:
    """Re-run a TASK or POLL step: activation sequence+1 ACTIVE and a QUEUED task that retries ``previous``.

    The activation keeps the first activation's input and deadlines; the task keeps the previous task's
    handler, application, queue, priority, input and keys, the original task's deadline and latest start,
    and gets ``max_attempts`` (what the chain left of its budget). A POLL step re-queries the same business
    round (a PollRound row, the round's frozen limits, its used rounds unchanged). The old activation is
    SUPERSEDED unless it ended FAILED or CANCELLED; the step is ACTIVE on the new one. The task takes a
    permit of ``application`` and ``queue`` (locked): None, with nothing written, when either is full.
    """
    quota = Quota.locked(locks=locks, application=application, queues={spec["queue"]: queue})
    activation = Activation(
        step=step,
        instance=instance,
        sequence=current.sequence + 1,
        input=first.input,
        deadline_at=first.deadline_at,
        latest_start_at=first.latest_start_at,
        created_at=now,
        updated_at=now,
    )
    retry = {"locks": locks, "quota": quota, "instance": instance, "activation": activation, "spec": spec}
    retry |= {"max_attempts": max_attempts, "deadline_at": original.deadline_at, "retry_of": previous, "now": now}
    if step.kind == StepKind.POLL:
        for name, value in _poll_fields(current).items():
            setattr(activation, name, value)
        activation.first_round, activation.first_round_attempts_used = business_round, attempts_used
        task = poll_round_start(**retry, round_number=business_round)
    else:
        task = task_create(**retry, latest_start_at=original.latest_start_at)
        activation.task = task
    if task is None:
        return None
    activation.save()
    if current.state not in _ENDS_KEPT:
        touch(current, now, state=ActivationState.SUPERSEDED)
    counters = {"activation_count": activation.sequence}
    if step.kind == StepKind.TASK:
        counters["attempts_before"] = step.attempts_before + previous.attempt_count
    touch(step, now, state=StepState.ACTIVE, current_activation=activation, **counters)
    return activation, task
