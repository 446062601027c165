"""A step's history is verified in SQL, not loaded: the answers stay those of a short history and the
query count of eligibility and of a RetryStep check does not grow with the number of history rows."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.ids import new_id
from history.models import (
    Activation,
    Attempt,
    AttemptState,
    PollRound,
    Queue,
    Task,
    TaskState,
)
from recovery.eligibility import instance_eligibility, operation_preview
from testkit import requests as rq
from testkit import states
from testkit.histories import poll_rounds_state, retry_chain_state

pytestmark = pytest.mark.django_db
SHORT, LONG = 50, 5000
DEEP = 500  # the corruption cases: a fault in the middle of a history this long


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
