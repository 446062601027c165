import pytest
from django.db import transaction

from history.locking import Level, LockOrderViolation, LockSet
from history.models import Queue


@pytest.mark.django_db
def test_locks_follow_the_fixed_order(tenancy):
    namespace, application, _ = tenancy
    with transaction.atomic():
        locks = LockSet()
        locks.lock(Level.INSTANCE, ["0" * 32])
        locks.lock(Level.INBOX, ["1" * 32])
        # The quota rows come after every engine row but the result stream.
        assert locks.lock_one(Level.APPLICATION, application.id) == application
        assert list(locks.lock_queues(namespace.id, ["payments"])) == ["payments"]
        with pytest.raises(LockOrderViolation):
            locks.lock(Level.TASK, ["2" * 32])


@pytest.mark.django_db
def test_rows_of_one_level_are_locked_in_key_order(tenancy):
    namespace, _, _ = tenancy
    Queue.objects.create(namespace=namespace, name="zeta")
    with transaction.atomic():
        locks = LockSet()
        locks.lock(Level.STEP, ["b" * 32])
        with pytest.raises(LockOrderViolation):
            locks.lock(Level.STEP, ["a" * 32])


@pytest.mark.django_db
def test_nothing_is_locked_after_the_result_stream(tenancy):
    with transaction.atomic():
        locks = LockSet()
        assert locks.lock_result_stream("c" * 32) == 1
        with pytest.raises(LockOrderViolation):
            locks.lock(Level.INBOX, ["d" * 32])


def test_locks_need_a_transaction():
    with pytest.raises(LockOrderViolation):
        LockSet()
