"""A step's history is verified in SQL, not loaded: the answers stay those of a short history and the
query count of eligibility and of a RetryStep check does not grow with the number of history rows."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from core.ids import new_id
from history.models import (
    Activation,
    ActivationState,
    Attempt,
    AttemptState,
    PollRound,
    Queue,
    StepState,
    Task,
    TaskState,
)
from recovery.eligibility import instance_eligibility, operation_preview
from tests import states
from tests.recovery import requests as rq

pytestmark = pytest.mark.django_db
SHORT, LONG = 50, 5000
DEEP = 500  # the corruption cases: a fault in the middle of a history this long
PENDING = states.PENDING_ANSWER


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
                result=PENDING if task_state == TaskState.SUCCEEDED else '{"error":"503"}',
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


def _eligibility(identity, state: states.State) -> dict:
    return instance_eligibility(identity=identity, instance_id=state.instance.id)["steps"][state.step.key]


def _retry_check(identity, state: states.State) -> dict:
    command = rq.retry(state)
    return operation_preview(identity=identity, operation="retry-step", instance_id=state.instance.id, command=command)


def _cost(call, identity, state: states.State) -> tuple[int, int]:
    """The queries a call runs and the length of their SQL (an id list in a query would grow it)."""
    with CaptureQueriesContext(connection) as queries:
        call(identity, state)
    return len(queries.captured_queries), sum(len(q["sql"]) for q in queries.captured_queries)


BUILDERS = {"retry-chain": retry_chain_state, "poll-rounds": poll_rounds_state}


@pytest.mark.parametrize("call", [_eligibility, _retry_check], ids=["eligibility", "retry-check"])
@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_the_queries_do_not_grow_with_the_step_history(tenancy, recoverer, build, call):
    short_queries, short_sql = _cost(call, recoverer, build(tenancy, SHORT))
    long_queries, long_sql = _cost(call, recoverer, build(tenancy, LONG))
    assert long_queries == short_queries
    assert long_sql - short_sql < 100  # only the numbers in the SQL get longer


def test_a_long_retry_chain_is_offered_retry_with_every_attempt_counted(tenancy, recoverer):
    state = retry_chain_state(tenancy, LONG)
    entry = _eligibility(recoverer, state)
    preview = entry["retry-step"]["preview"]
    assert preview["new_activation"] == {"sequence": LONG + 1, "state": "ACTIVE"}
    assert preview["attempt_budget"] == {"used": LONG, "remaining": 5}
    assert preview["new_task"]["retry_of"] == state.tasks[-1].id
    assert entry["resolve-step"]["possible"] is True
    assert entry["review-task"]["reason"] == "no task of this step is NEEDS_REVIEW"
    assert entry["continue-poll"]["reason"] == "ContinuePoll applies to POLL steps; 'charge' is TASK"
    assert entry["rearm-wait"]["reason"] == "RearmWait applies to SIGNAL and TIMER steps; 'charge' is TASK"


def test_a_poll_activation_with_many_rounds_retries_only_its_last_round(tenancy, recoverer):
    state = poll_rounds_state(tenancy, LONG)
    entry = _eligibility(recoverer, state)
    preview = entry["retry-step"]["preview"]
    assert preview["new_activation"] == {"sequence": 2, "state": "ACTIVE", "first_round": LONG}
    assert preview["attempt_budget"] == {"used": 1, "remaining": 1}
    assert preview["new_task"]["retry_of"] == state.tasks[-1].id
    assert entry["resolve-step"]["possible"] is True
    assert entry["continue-poll"]["reason"] == "activation 1 is FAILED, not NEEDS_REVIEW"
    assert entry["rearm-wait"]["reason"] == "a POLL step's final-signal wait is recovered by RetryStep, not RearmWait"


MIDDLE = DEEP // 2


def _task_update(built, **fields):
    Task.objects.filter(pk=built.tasks[MIDDLE].pk).update(**fields)


def _activation_update(built, **fields):
    Activation.objects.filter(pk=built.activations[MIDDLE].pk).update(**fields)


def _other_queue(state):
    _task_update(state, queue=Queue.objects.create(namespace_id=state.instance.namespace_id, name="ledger"))


def _middle(state) -> str:
    return state.tasks[MIDDLE].id


# (builder, corruption, code, reason of RetryStep, whether ResolveStep is refused the same way)
CORRUPTIONS = {
    "retry-of-broken": (
        retry_chain_state,
        lambda s: _task_update(s, retry_of=None),
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} does not retry its predecessor {s.tasks[MIDDLE - 1].id}",
        False,
    ),
    "attempt-row-missing": (
        retry_chain_state,
        lambda s: Attempt.objects.filter(task_id=_middle(s)).delete(),
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} counts 1 attempts but has other attempt rows",
        False,
    ),
    "max-attempts-off": (
        retry_chain_state,
        lambda s: _task_update(s, max_attempts=DEEP + 5 - MIDDLE + 1),
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} has max_attempts {DEEP + 5 - MIDDLE + 1}, not the {DEEP + 5 - MIDDLE} left",
        False,
    ),
    "input-trailing-space": (
        retry_chain_state,
        lambda s: _task_update(s, input='{"order":"A-1","amount":1.10} '),
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} differs from the step's fixed handler, queue, priority or input",
        False,
    ),
    "sequence-gap": (
        retry_chain_state,
        lambda s: _activation_update(s, sequence=DEEP + 1),
        "UNAVAILABLE",
        lambda s: "the activation sequence of step 'charge' has a gap",
        True,
    ),
    "activation-of-another-instance": (
        retry_chain_state,
        lambda s: _activation_update(s, instance_id=new_id()),
        "UNAVAILABLE",
        lambda s: "an activation of step 'charge' belongs to another instance",
        True,
    ),
    "activation-names-a-missing-task": (
        retry_chain_state,
        lambda s: _activation_update(s, task_id="0" * 32),
        "UNAVAILABLE",
        lambda s: f"task {'0' * 32} and step 'charge' do not reference each other",
        True,
    ),
    "task-on-another-queue": (
        retry_chain_state,
        _other_queue,
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} is not on the step's fixed queue",
        True,
    ),
    "task-leased": (
        retry_chain_state,
        lambda s: _task_update(s, state=TaskState.LEASED),
        "FAILED_PRECONDITION",
        lambda s: f"task {_middle(s)} is LEASED: review it or let it finish first",
        True,
    ),
    "task-answered": (
        retry_chain_state,
        lambda s: _task_update(s, state=TaskState.SUCCEEDED),
        "FAILED_PRECONDITION",
        lambda s: f"task {_middle(s)} is SUCCEEDED: resolve the step instead",
        False,
    ),
    "permit-held": (
        retry_chain_state,
        lambda s: _task_update(s, permit_held=True),
        "FAILED_PRECONDITION",
        lambda s: f"task {_middle(s)} still holds its quota permit",
        True,
    ),
    "attempt-running": (
        retry_chain_state,
        lambda s: Attempt.objects.filter(task_id=_middle(s)).update(state=AttemptState.RUNNING),
        "FAILED_PRECONDITION",
        lambda s: f"task {_middle(s)} has a RUNNING attempt",
        True,
    ),
    "round-of-another-instance": (
        poll_rounds_state,
        lambda s: PollRound.objects.filter(task_id=_middle(s)).update(instance_id=new_id()),
        "UNAVAILABLE",
        lambda s: "a poll round of step 'settle' belongs to another instance",
        True,
    ),
    "round-task-not-named-back": (
        poll_rounds_state,
        lambda s: _task_update(s, source_round=DEEP + 1),
        "UNAVAILABLE",
        lambda s: f"task {_middle(s)} is not referenced back by its source activation",
        True,
    ),
}


@pytest.mark.parametrize(("build", "corrupt", "code", "reason", "resolve_too"), CORRUPTIONS.values(), ids=CORRUPTIONS)
def test_a_fault_deep_in_a_long_history_is_refused_with_its_words(
    tenancy, recoverer, build, corrupt, code, reason, resolve_too
):
    state = build(tenancy, DEEP)
    corrupt(state)
    entry = _eligibility(recoverer, state)
    refusal = {"possible": False, "code": code, "reason": reason(state)}
    assert entry["retry-step"] == refusal
    if resolve_too:
        assert entry["resolve-step"] == refusal
    else:
        assert entry["resolve-step"]["possible"] is True
