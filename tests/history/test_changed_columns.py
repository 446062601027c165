"""A followed row read from the database writes only the columns changed since, and nothing when none did."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history.models import WorkflowInstance
from tests.factories import WorkflowInstanceFactory


def _updates(run) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        run()
    return [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]


@pytest.mark.django_db
def test_a_save_writes_the_changed_columns_only_and_an_unchanged_row_writes_nothing(tenancy):
    row = WorkflowInstance.objects.get(pk=WorkflowInstanceFactory(namespace=tenancy[0]).pk)
    row.revision += 1
    (sql,) = _updates(row.save)
    assert "`revision`" in sql.replace('"', "`") and "`state`" not in sql.replace('"', "`")
    assert _updates(row.save) == []
    row.input = '{"changed":true}'
    (sql,) = _updates(row.save)
    assert "`input`" in sql.replace('"', "`") and "`revision`" not in sql.replace('"', "`")
    assert WorkflowInstance.objects.get(pk=row.pk).input == '{"changed":true}'


@pytest.mark.django_db
def test_a_column_changed_elsewhere_since_the_read_is_left_as_it_is(tenancy):
    row = WorkflowInstance.objects.get(pk=WorkflowInstanceFactory(namespace=tenancy[0]).pk)
    WorkflowInstance.objects.filter(pk=row.pk).update(business_key="set-elsewhere")
    row.revision += 1
    row.save()
    stored = WorkflowInstance.objects.get(pk=row.pk)
    assert (stored.business_key, stored.revision) == ("set-elsewhere", row.revision)


@pytest.mark.django_db
def test_a_column_deferred_at_the_read_and_changed_after_it_was_loaded_is_saved(tenancy):
    created = WorkflowInstanceFactory(namespace=tenancy[0])
    row = WorkflowInstance.objects.only("id", "state").get(pk=created.pk)
    assert row.business_key == created.business_key  # loaded now
    row.business_key = "changed-after-load"
    row.save()
    assert WorkflowInstance.objects.get(pk=row.pk).business_key == "changed-after-load"


@pytest.mark.django_db
def test_a_column_deferred_at_the_read_and_set_without_loading_it_is_saved(tenancy):
    created = WorkflowInstanceFactory(namespace=tenancy[0])
    row = WorkflowInstance.objects.only("id", "state").get(pk=created.pk)
    row.business_key = "set-while-deferred"
    row.save()
    assert WorkflowInstance.objects.get(pk=row.pk).business_key == "set-while-deferred"


@pytest.mark.django_db
def test_a_column_deferred_at_the_read_and_saved_counts_as_read_after(tenancy):
    row = WorkflowInstance.objects.only("id", "state").get(pk=WorkflowInstanceFactory(namespace=tenancy[0]).pk)
    row.business_key = "set-while-deferred"
    row.save()
    assert _updates(row.save) == []
