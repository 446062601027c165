"""Every read endpoint runs a fixed number of SQL queries, whatever the page size and history size.

Baselines per endpoint, NetBox style: a change that adds a query per row fails here. The
histories (10 and 10 000 rows of each list) are bulk-inserted to keep the test fast.
"""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from core.identity import Identity
from core.ids import new_id
from history.models import (
    Activation,
    InstanceEvent,
    InstanceState,
    PollRound,
    Scope,
    Step,
    Task,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowOperation,
)
from history.selectors.access import definitions_kept
from recovery.eligibility import instance_eligibility
from tests.conftest import ENDPOINTS, LISTS, bearer
from tests.factories import activate, poll_round, step_of

# Authentication (1) + the instance with its namespace name and gate (1), then what each endpoint reads itself;
# the instance's definition is read once per process (``definitions_kept``). Every endpoint is at most 6.
BASELINE = {
    "instance": 5,  # + steps, current activations, their tasks; a RUNNING instance's eligibility reads nothing
    "activations": 4,  # + step, the page (its keys and rows in one statement)
    "activation": 5,  # + step, requested and current activation, current task
    "activation_with_wait": 6,  # + step, requested and current activation, current task, wait
    "rounds": 5,  # + activation with its step and fixed queue, the page, their tasks
    "signals": 3,  # + the page
    "signal": 3,  # + signal
    "signal_operations": 5,  # + signal, page keys, page rows
    "signal_operation": 4,  # + signal, record
    "task": 6,  # + task, activation with its step, fixed queue, attempts
    "poll_task": 6,  # + task, activation with its step and the round naming the task, fixed queue, attempts
    "operations": 4,  # + page keys, page rows
    # Authentication, then the task with its queue's name, the instance, the activation with its step.
    "source": 4,
    "poll_source": 4,  # the activation also with the round naming the task
    "worker_source": 4,
    "events": 3,  # + the page, its rows with the ids their links need
}
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
ROWS = 10_000


def _queries(api, token, path, limit):
    query = {"limit": str(limit)} if limit else None
    with CaptureQueriesContext(connection) as captured:
        response = api.get(path, query, **bearer(token))
    assert response.status_code == 200, response.content
    statements = [q["sql"].lstrip().upper() for q in captured.captured_queries]
    assert not [s for s in statements if s.startswith(WRITES)], "a read wrote"
    return len(statements)


@pytest.fixture
def every_read(history_rows):
    """``history_rows`` plus a POLL query task, and a POLL activation with a final-signal wait and a round."""
    w = f"/v1/workflows/{history_rows.workflow.id}"
    round_task = PollRound.objects.get(activation=history_rows.poll).task_id
    history_rows.paths["poll_task"] = (f"{w}/tasks/{round_task}", Scope.READ, False)
    history_rows.paths["source"] = (f"/v1/tasks/{history_rows.charge.task_id}/source", Scope.READ, False)
    history_rows.paths["poll_source"] = (f"/v1/tasks/{round_task}/source", Scope.READ, False)
    history_rows.paths["worker_source"] = (f"/v1/tasks/{round_task}/source", Scope.TASKS_WORK, False)
    waiting = activate(step_of(history_rows.workflow, "settle"), wait={})
    poll_round(waiting, 1)
    history_rows.paths["activation_with_wait"] = (f"{w}/steps/settle/activations/{waiting.id}", Scope.READ, False)
    return history_rows


def _measure(history_rows, api, token_for):
    counts = {}
    for name in history_rows.paths:
        path, scope, is_list = history_rows.paths[name]
        token = token_for(scope)
        for limit in (1, 100) if is_list else (None,):
            counts[(name, limit)] = _queries(api, token, path, limit)
    return counts


def _clone(template, vary) -> None:
    """Insert copies of ``template``'s row, one per dict of ``vary`` (attname -> value), in one statement."""
    meta = template._meta
    fields = meta.concrete_fields
    base = [field.get_db_prep_save(getattr(template, field.attname), connection) for field in fields]
    index = {field.attname: position for position, field in enumerate(fields)}
    rows = []
    for changes in vary:
        row = list(base)
        for attname, value in changes.items():
            row[index[attname]] = fields[index[attname]].get_db_prep_save(value, connection)
        rows.append(row)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})", rows)


def _grow_history(history_rows, size):
    """Bring every list the endpoints read to ``size`` rows, each new row newer than the existing ones."""
    have = PollRound.objects.filter(activation=history_rows.poll).count()
    numbers = range(have + 1, size + 1)
    start = clock.now() + dt.timedelta(seconds=1)
    times = [start + dt.timedelta(microseconds=n) for n in numbers]
    _clone(
        history_rows.charge,
        ({"id": new_id(), "sequence": n, "created_at": t} for n, t in zip(numbers, times, strict=True)),
    )
    first_round = PollRound.objects.filter(activation=history_rows.poll).order_by("round").first()
    task_ids = [new_id() for _ in numbers]
    _clone(
        Task.objects.get(id=first_round.task_id),
        ({"id": i, "source_round": n} for n, i in zip(numbers, task_ids, strict=True)),
    )
    _clone(first_round, ({"id": new_id(), "round": n, "task_id": i} for n, i in zip(numbers, task_ids, strict=True)))
    _clone(history_rows.signal, ({"id": new_id(), "accepted_at": t} for t in times))
    _clone(history_rows.operation, ({"id": new_id(), "created_at": t} for t in times))
    _clone(
        WorkflowOperation.objects.filter(workflow=history_rows.workflow).first(),
        ({"id": new_id(), "created_at": t} for t in times),
    )
    events = InstanceEvent.objects.filter(instance=history_rows.workflow)
    last = events.order_by("-sequence").first()
    _clone(last, ({"id": new_id(), "sequence": last.sequence + n} for n in range(1, size - events.count() + 1)))


def test_every_read_runs_a_constant_number_of_queries_whatever_the_limit_and_history(every_read, api, token_for):
    history_rows = every_read
    definitions_kept(history_rows.workflow.definition_id)  # as a process that has served a request has
    _grow_history(history_rows, 10)
    small = _measure(history_rows, api, token_for)
    _grow_history(history_rows, ROWS)
    large = _measure(history_rows, api, token_for)

    assert small == large
    assert PollRound.objects.filter(activation=history_rows.poll).count() == ROWS
    assert Activation.objects.filter(step_id=history_rows.charge.step_id).count() == ROWS
    assert {name: count for (name, _), count in small.items()} == BASELINE
    for name in LISTS:
        assert small[(name, 1)] == small[(name, 100)]


def test_reads_never_write_not_even_on_a_refusal(history_rows, api, token_for):
    """Only SELECTs, whether the read succeeds, pages on, finds nothing or finds corruption."""
    statements = []
    for name in ENDPOINTS:
        path, scope, is_list = history_rows.paths[name]
        token = token_for(scope)
        with CaptureQueriesContext(connection) as captured:
            page = api.get(path, {"limit": "1"} if is_list else None, **bearer(token))
            cursor = page.json()["data"].get("next_cursor") if is_list else None
            if cursor:
                api.get(path, {"limit": "1", "cursor": cursor}, **bearer(token))
            api.get(path.replace(history_rows.workflow.id, "e" * 32), **bearer(token))
        statements += [q["sql"].lstrip().split(" ", 1)[0].upper() for q in captured.captured_queries]
    Task.objects.filter(id=history_rows.charge.task_id).update(source_activation_id="d" * 32)
    token = token_for("workflows:read")
    with CaptureQueriesContext(connection) as captured:
        assert api.get(history_rows.paths["instance"][0], **bearer(token)).status_code == 503
    statements += [q["sql"].lstrip().split(" ", 1)[0].upper() for q in captured.captured_queries]
    assert set(statements) == {"SELECT"}


@pytest.mark.parametrize("state", [s for s in InstanceState if s != InstanceState.NEEDS_REVIEW])
def test_the_instance_detail_refuses_recovery_outside_review_exactly_as_the_full_eligibility_does(
    history_rows, api, token_for, state
):
    """Outside NEEDS_REVIEW the detail answers without reading more; the admin's eligibility runs every check."""
    WorkflowInstance.objects.filter(id=history_rows.workflow.id).update(state=state)
    response = api.get(history_rows.paths["instance"][0], **bearer(token_for(Scope.READ)))
    assert response.status_code == 200, response.content
    operator = Identity(
        namespace_id=history_rows.workflow.namespace_id, actor_id="b" * 32, scopes=frozenset(), queues=None
    )
    assert response.json()["data"]["eligibility"] == instance_eligibility(
        identity=operator, instance_id=history_rows.workflow.id
    )


def test_a_missing_definition_is_still_told_from_a_missing_instance(history_rows, api, token_for):
    """The instance's definition is read apart from it (once per process): a lost one is 503, an unknown instance
    404."""
    WorkflowDefinition.objects.filter(id=history_rows.workflow.definition_id).delete()
    for name in ENDPOINTS:
        path, scope, _ = history_rows.paths[name]
        token = token_for(scope)
        assert api.get(path, **bearer(token)).status_code == 503, name
        assert api.get(path.replace(history_rows.workflow.id, "e" * 32), **bearer(token)).status_code == 404, name


def test_rounds_under_a_step_without_its_row_are_unavailable_not_missing(history_rows, api, token_for):
    """The activation is read joined to its step: a lost step row is 503 before the activation's 404."""
    path = history_rows.paths["rounds"][0]
    Step.objects.filter(id=history_rows.poll.step_id).delete()
    token = token_for(Scope.READ)
    assert api.get(path, **bearer(token)).status_code == 503
    assert api.get(path.replace(history_rows.poll.id, "e" * 32), **bearer(token)).status_code == 503
