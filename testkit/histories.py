"""Long step histories written in bulk: a TASK step retried thousands of times, a POLL activation with
thousands of rounds. Each row is what the engine would have written; only the speed of writing them differs."""

import datetime as dt

from core import clock
from core.ids import new_id
from history.models import Activation, ActivationState, Attempt, PollRound, StepState, Task, TaskState
from testkit import states


def _history_add(state: states.State, key: str, runs: list[tuple[int | None, str]], *, poll: bool) -> states.State:
    """Bulk rows for one step, one task per (source round, task state) with one attempt in that state: TASK,
    an activation per task, each retrying its predecessor within the budget; POLL, one activation
    querying each round once. The last activation is current and FAILED."""
    step, instance, now = state.steps[key], state.instance, clock.now()
    spec = state.definition.step_spec(key)
    count = len(runs)
    activation_ids = [new_id() for _ in range(1 if poll else count)]
    task_ids = [new_id() for _ in range(count)]
    activations = [
        Activation(
            id=activation_id,
            step=step,
            instance=instance,
            sequence=index + 1,
            state=ActivationState.FAILED,
            revision=3,
            task_id=None if poll else task_ids[index],
            input='{"order":"A-1"}',
            deadline_at=now + 2 * states.HOUR,
            latest_start_at=now + states.HOUR,
            created_at=now,
            updated_at=now,
            **(_poll_fields(count, task_ids[-1], now) if poll else {}),
        )
        for index, activation_id in enumerate(activation_ids)
    ]
    tasks, attempts, poll_rounds = [], [], []
    for index, (number, task_state) in enumerate(runs):
        created = now - dt.timedelta(seconds=count - index)
        source = activation_ids[0 if poll else index]
        tasks.append(
            Task(
                id=task_ids[index],
                namespace_id=instance.namespace_id,
                application=state.application,
                queue=state.queue,
                handler=spec["handler"],
                priority=spec.get("priority", 0),
                input='{"order":"A-1","amount":1.10}',
                business_key=instance.business_key,
                concurrency_key="card-42",
                state=task_state,
                revision=3,
                attempt_count=1,
                max_attempts=spec["attempts_per_round"] if poll else spec["max_attempts"] - index,
                deadline_at=now + states.HOUR,
                latest_start_at=now + states.HOUR,
                retry_of_id=None if poll or index == 0 else task_ids[index - 1],
                source_instance=instance,
                source_activation_id=source,
                source_round=number,
                outcome=task_state,
                result=states.PENDING_ANSWER if task_state == TaskState.SUCCEEDED else '{"error":"503"}',
                permit_held=False,
                execution_settled=True,
                created_at=created,
                updated_at=created,
            )
        )
        attempts.append(
            Attempt(task_id=task_ids[index], number=1, worker="worker-1", state=task_state, finished_at=created)
        )
        if poll:
            poll_rounds.append(
                PollRound(activation_id=source, instance=instance, round=number, task_id=task_ids[index])
            )
    state.activations.extend(activations)
    state.tasks.extend(tasks)
    Activation.objects.bulk_create(activations, batch_size=1000)
    Task.objects.bulk_create(tasks, batch_size=1000)
    Attempt.objects.bulk_create(attempts, batch_size=1000)
    PollRound.objects.bulk_create(poll_rounds, batch_size=1000)
    step.current_activation_id, step.state = activation_ids[-1], StepState.FAILED
    step.revision += 1
    step.save()
    return state


def _poll_fields(count: int, last_task_id: str, now: dt.datetime) -> dict:
    return {
        "first_round": 1,
        "first_round_attempts_used": 0,
        "used_rounds": count,
        "max_rounds": count + 5,
        "attempts_per_round": states.POLL_STEP["attempts_per_round"],
        "interval_seconds": states.POLL_STEP["interval_seconds"],
        "poll_deadline_at": now + 2 * states.HOUR,
        "round_deadline_at": now + states.HOUR,
        "last_task_id": last_task_id,
    }


def retry_chain_state(tenancy, size: int) -> states.State:
    """A TASK step retried ``size`` times (every task FAILED after one attempt), with budget to spare."""
    state = states.instance_make(tenancy, [states.TASK_STEP | {"max_attempts": size + 5}])
    return _history_add(state, "charge", [(None, TaskState.FAILED)] * size, poll=False)


def poll_rounds_state(tenancy, size: int) -> states.State:
    """One POLL activation whose ``size`` rounds answered PENDING but the last, whose query FAILED."""
    state = states.instance_make(tenancy, [states.POLL_STEP])
    runs = [(n, TaskState.SUCCEEDED) for n in range(1, size)] + [(size, TaskState.FAILED)]
    return _history_add(state, "settle", runs, poll=True)
