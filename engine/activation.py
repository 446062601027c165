"""Creating activations, tasks, poll rounds and waits: first activations and the operator's re-runs.

Every function here runs inside the caller's transaction, with the rows it changes already
locked in the fixed order; none of them bumps the instance revision (the caller does once).
"""

import datetime as dt

from core import clock, exactjson
from core.errors import InvalidArgument
from core.ids import new_id
from engine.commands import is_text
from engine.quota import Quota, permit_take
from engine.state import touch
from history.locking import LockSet
from history.models import (
    Activation,
    ActivationState,
    Application,
    PollRound,
    Queue,
    Step,
    StepKind,
    StepState,
    Task,
    TaskState,
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
    input_text: str,
    max_attempts: int,
    deadline_at: dt.datetime | None,
    latest_start_at: dt.datetime | None,
    business_key: str,
    concurrency_key: str,
    source_round: int | None = None,
    retry_of: Task | None = None,
) -> Task | None:
    """A QUEUED task holding a permit of the quota's application and the step's queue, or None when full.

    The task is saved; nothing is written when the quota is full.
    """
    queue = quota.queues[spec["queue"]]
    if not permit_take(locks=locks, application=quota.application, queue=queue):
        return None
    now = clock.now()
    return Task.objects.create(
        namespace_id=instance.namespace_id,
        application=quota.application,
        queue=queue,
        handler=spec["handler"],
        priority=spec["priority"],
        input=input_text,
        business_key=business_key,
        concurrency_key=concurrency_key,
        max_attempts=max_attempts,
        deadline_at=deadline_at,
        latest_start_at=latest_start_at,
        retry_of=retry_of,
        source_instance=instance,
        source_activation_id=activation.id,
        source_round=source_round,
        permit_held=True,
        created_at=now,
        updated_at=now,
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
) -> Task | None:
    """Open business round ``used_rounds + 1`` of a POLL activation: its query task and PollRound row.

    By default the round's task gets max_attempts = the frozen attempts_per_round and a deadline
    of now + round_deadline_seconds capped by the total query deadline; a recovery re-running
    the same round passes the remaining attempts, the round's original deadline and the task it
    retries. None (nothing written) when the quota is full. The caller saves the activation.
    """
    now = clock.now()
    round_number = (activation.used_rounds or 0) + 1
    round_deadline = deadline_at or min(
        now + dt.timedelta(seconds=spec["round_deadline_seconds"]), activation.poll_deadline_at
    )
    task = task_create(
        locks=locks,
        quota=quota,
        instance=instance,
        activation=activation,
        spec=spec,
        input_text=activation.input,
        max_attempts=max_attempts or activation.attempts_per_round,
        deadline_at=round_deadline,
        latest_start_at=None,
        business_key=instance.business_key,
        concurrency_key=f"{instance.id}/{spec['key']}",
        source_round=round_number,
        retry_of=retry_of,
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
    step: Step,
    activation: Activation,
    kind: WaitKind,
    signal_spec: dict | None,
    deadline_at: dt.datetime,
    fire_at: dt.datetime | None = None,
    generation: int = 1,
) -> Wait:
    """A WAITING wait for an activation (SIGNAL, TIMER or a POLL's final signal); sets activation.wait."""
    now = clock.now()
    wait = Wait.objects.create(
        instance=instance,
        step=step,
        activation=activation,
        kind=kind,
        generation=generation,
        signal_name=signal_spec["name"] if signal_spec else "",
        payload_version=signal_spec["payload_version"] if signal_spec else "",
        correlation_key=correlation_key_of(instance=instance, source=signal_spec["correlation"]) if signal_spec else "",
        deadline_at=deadline_at,
        fire_at=fire_at,
        created_at=now,
        updated_at=now,
    )
    activation.wait = wait
    return wait


def step_activate(*, locks: LockSet, quota: Quota, instance: WorkflowInstance, step: Step, spec: dict) -> bool:
    """Activation 1 of a PENDING step (the step must be locked); False, with nothing written, when the quota is full.

    TASK: an ACTIVE activation and its QUEUED task (deadline now + deadline_seconds, latest start,
    exact instance input, business and concurrency key). POLL: the frozen limits and round 1.
    SIGNAL / TIMER: a WAITING activation with its wait.
    """
    now = clock.now()
    sequence = Activation.objects.filter(step=step).count() + 1
    activation = Activation(
        step=step, instance=instance, sequence=sequence, input=instance.input, created_at=now, updated_at=now
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
            input_text=instance.input,
            max_attempts=spec["max_attempts"],
            deadline_at=activation.deadline_at,
            latest_start_at=activation.latest_start_at,
            business_key=instance.business_key,
            concurrency_key=f"{instance.id}/{step.key}",
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
        activation.save()
        if kind == StepKind.SIGNAL:
            wait_create(
                instance=instance,
                step=step,
                activation=activation,
                kind=WaitKind.SIGNAL,
                signal_spec=spec,
                deadline_at=now + dt.timedelta(seconds=spec["deadline_seconds"]),
            )
        else:
            wait_create(
                instance=instance,
                step=step,
                activation=activation,
                kind=WaitKind.TIMER,
                signal_spec=None,
                fire_at=now + dt.timedelta(seconds=spec["duration_seconds"]),
                deadline_at=now + dt.timedelta(seconds=spec["deadline_seconds"]),
            )
        step.state = StepState.WAITING
    activation.save()
    step.current_activation = activation
    touch(step, now)
    return True


def wait_supersede(
    *,
    instance: WorkflowInstance,
    step: Step,
    activation: Activation,
    wait: Wait,
    now: dt.datetime,
    carried: dict[str, object] | None = None,
) -> tuple[Activation, Wait]:
    """Activation sequence+1 WAITING on wait generation+1 with the same contract, correlation key, deadline and
    fire_at (a deadline is never extended); the old activation and wait become SUPERSEDED, the old wait keeping
    its winner, and the step WAITING on the new activation. ``carried``: the POLL fields the new activation keeps.

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
        **(carried or {}),
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
        state=WaitState.WAITING,
        created_at=now,
        updated_at=now,
    )
    touch(wait, now, state=WaitState.SUPERSEDED)
    touch(activation, now, state=ActivationState.SUPERSEDED)
    touch(step, now, state=StepState.WAITING, current_activation=following)
    return following, new_wait


def activation_retry(
    *,
    locks: LockSet,
    application: Application,
    queue: Queue,
    instance: WorkflowInstance,
    step: Step,
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
    if not permit_take(locks=locks, application=application, queue=queue):
        return None
    activation_id, task_id = new_id(), new_id()
    is_poll = step.kind == StepKind.POLL
    poll = {}
    if is_poll:
        poll = {
            "first_round": business_round,
            "first_round_attempts_used": attempts_used,
            "used_rounds": current.used_rounds,
            "max_rounds": current.max_rounds,
            "attempts_per_round": current.attempts_per_round,
            "interval_seconds": current.interval_seconds,
            "poll_deadline_at": current.poll_deadline_at,
            "round_deadline_at": original.deadline_at,
            "last_task_id": task_id,
        }
    activation = Activation.objects.create(
        id=activation_id,
        step=step,
        instance=instance,
        sequence=current.sequence + 1,
        state=ActivationState.ACTIVE,
        task_id=None if is_poll else task_id,
        input=first.input,
        deadline_at=first.deadline_at,
        latest_start_at=first.latest_start_at,
        created_at=now,
        updated_at=now,
        **poll,
    )
    task = Task.objects.create(
        id=task_id,
        namespace_id=previous.namespace_id,
        application_id=previous.application_id,
        queue_id=previous.queue_id,
        handler=previous.handler,
        priority=previous.priority,
        input=previous.input,
        business_key=previous.business_key,
        concurrency_key=previous.concurrency_key,
        state=TaskState.QUEUED,
        max_attempts=max_attempts,
        deadline_at=original.deadline_at,
        latest_start_at=original.latest_start_at,
        retry_of=previous,
        source_instance=instance,
        source_activation=activation,
        source_round=business_round,
        permit_held=True,
        created_at=now,
        updated_at=now,
    )
    if is_poll:
        PollRound.objects.create(
            activation=activation, instance=instance, round=business_round, task=task, created_at=now
        )
    if current.state not in (ActivationState.FAILED, ActivationState.CANCELLED):
        touch(current, now, state=ActivationState.SUPERSEDED)
    touch(step, now, state=StepState.ACTIVE, current_activation=activation)
    return activation, task
