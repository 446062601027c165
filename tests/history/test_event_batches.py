"""The timeline writer inside a transaction body: one insert at its end, the sequences read by the insert.

Sequences stay gap-free and unique whatever happens inside the body: a savepoint rolled back,
a read of the timeline before the end, an error that rolls the whole body back.
"""

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from history.events import event_append
from history.locking import atomic_with_retry
from history.models import InstanceEvent
from tests.factories import WorkflowInstanceFactory

TABLE = InstanceEvent._meta.db_table
CREATED = 3  # what the factory's instance and its steps wrote


def _append(instance_id: str, n: int) -> None:
    for _ in range(n):
        event_append(instance_id=instance_id, kind="instance.state", subject_type="instance", subject_id=instance_id)


def _sequences(instance_id: str) -> list[int]:
    """The instance's sequences after those its creation wrote, counted from 1."""
    rows = InstanceEvent.objects.filter(instance_id=instance_id).order_by("sequence").values_list("sequence", flat=True)
    sequences = list(rows)
    assert sequences == list(range(1, len(sequences) + 1))
    return [sequence - CREATED for sequence in sequences[CREATED:]]


@pytest.fixture
def instances(tenancy):
    first = WorkflowInstanceFactory(namespace=tenancy[0])
    second = WorkflowInstanceFactory(namespace=tenancy[0], definition=first.definition)
    assert InstanceEvent.objects.filter(instance_id__in=[first.id, second.id]).count() == 2 * CREATED
    return first.id, second.id


@pytest.mark.django_db
def test_a_body_inserts_the_events_of_every_instance_in_one_statement(instances):
    a, b = instances
    _append(a, 2)  # outside a body: read and insert per event
    with CaptureQueriesContext(connection) as captured:
        atomic_with_retry(lambda: (_append(a, 3), _append(b, 2), _append(a, 1)))
    statements = [q["sql"] for q in captured.captured_queries if TABLE in q["sql"]]
    assert [s.split(None, 1)[0] for s in statements] == ["INSERT"]
    assert _sequences(a) == [1, 2, 3, 4, 5, 6] and _sequences(b) == [1, 2]


@pytest.mark.django_db
def test_a_savepoint_rolled_back_inside_a_body_leaves_no_gap(instances):
    a, _ = instances

    def body():
        _append(a, 2)
        try:
            with transaction.atomic():
                _append(a, 2)
                raise DatabaseError("the inner block fails")
        except DatabaseError:
            pass
        _append(a, 1)
        with transaction.atomic():
            _append(a, 1)  # released: kept
        _append(a, 1)

    atomic_with_retry(body)
    assert _sequences(a) == [1, 2, 3, 4, 5]


@pytest.mark.django_db
def test_a_read_of_the_timeline_inside_a_body_sees_its_events(instances):
    a, _ = instances
    seen = atomic_with_retry(lambda: (_append(a, 3), InstanceEvent.objects.filter(instance_id=a).count())[1])
    assert seen == CREATED + 3


@pytest.mark.django_db
def test_a_body_that_fails_writes_no_event_and_the_next_one_counts_from_the_table(instances):
    a, _ = instances

    def failing():
        _append(a, 2)
        raise DatabaseError("the body fails")

    with pytest.raises(DatabaseError):
        atomic_with_retry(failing)
    atomic_with_retry(lambda: atomic_with_retry(lambda: _append(a, 2)) or _append(a, 1))
    assert _sequences(a) == [1, 2, 3]
