"""A prepared read answers what its queryset answers, compiled once, and refuses a build it cannot run again."""

import datetime as dt

import pytest
from django.db import connection
from django.db.models import Exists, OuterRef
from django.test.utils import CaptureQueriesContext

from history.models import Activation, Gate, Signal, Step, WorkflowInstance
from history.prepared import Prepared, compile_once
from history.selectors.pagination import keyset_page, prepared_page
from history.selectors.signals import SIGNALS
from tests.factories import SignalFactory, WorkflowInstanceFactory

T0 = dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)


def _signals(workflow_id: str):
    return Signal.objects.filter(workflow_id=workflow_id)


def test_models_with_their_joined_rows_and_annotations_are_those_of_the_queryset(workflow):
    def build(instance_id, namespace_id):
        return (
            WorkflowInstance.objects.select_related("definition")
            .annotate(has_gate=Exists(Gate.objects.filter(pk=OuterRef("pk"))))
            .filter(id=instance_id, namespace_id=namespace_id)
        )

    read = Prepared(build)
    other = WorkflowInstanceFactory(namespace=workflow.namespace)
    for instance in (workflow, other):
        (expected,) = build(instance.id, instance.namespace_id)
        (row,) = read(instance.id, instance.namespace_id)
        assert type(row) is WorkflowInstance and row.pk == expected.pk
        assert [getattr(row, f.attname) for f in WorkflowInstance._meta.concrete_fields] == [
            getattr(expected, f.attname) for f in WorkflowInstance._meta.concrete_fields
        ]
        assert (row.definition.spec, row.has_gate) == (expected.definition.spec, expected.has_gate)
    assert read(workflow.id, other.namespace_id + "x") == [] and read.first("0" * 32, workflow.namespace_id) is None


def test_values_lists_times_and_whole_numbers_are_read_as_the_queryset_reads_them(workflow):
    for n, c in enumerate("abcd"):
        at = T0 + dt.timedelta(seconds=n)
        SignalFactory(workflow=workflow, id=c * 32, accepted_at=at, target_activation_sequence=n + 1)

    def build(workflow_id, since, version):
        rows = Signal.objects.filter(workflow_id=workflow_id, accepted_at__gte=since)
        return rows.filter(target_activation_sequence__lte=version).order_by("id").values_list("id", "accepted_at")

    read = Prepared(build)
    for since, version in ((T0, 4), (T0 + dt.timedelta(seconds=1), 3), (T0 + dt.timedelta(days=1), 9)):
        assert read(workflow.id, since, version) == list(build(workflow.id, since, version))
    flat = Prepared(lambda workflow_id: _signals(workflow_id).order_by("-id").values_list("id", flat=True))
    assert flat(workflow.id) == [c * 32 for c in "dcba"]


def test_a_read_is_built_once_and_each_run_is_one_statement_with_its_own_values(workflow):
    builds = []

    def build(instance_id, key):
        builds.append((instance_id, key))
        return Step.objects.filter(instance_id=instance_id, key=key, kind="TASK")  # a constant stays a constant

    read = Prepared(build)
    charge = read.first(workflow.id, "charge")
    assert charge is not None and charge.key == "charge" and len(builds) == 2  # with two sets of stand-ins
    with CaptureQueriesContext(connection) as queries:
        assert read(workflow.id, "settle") == []  # a POLL step: the constant kind still filters
        assert read.first(workflow.id, "charge").pk == charge.pk
    assert len(queries) == 2 and len(builds) == 2


def test_a_build_whose_values_do_not_reach_the_sql_as_given_is_refused(workflow):
    rewritten = Prepared(lambda key: Step.objects.filter(key__startswith=key))
    with pytest.raises(AssertionError, match="computed from a value"):
        rewritten("char")
    derived = Prepared(lambda sequence: Activation.objects.filter(sequence__gt=sequence + 1))
    with pytest.raises(AssertionError, match="computed from a value or the clock"):
        derived(3)
    clocked = Prepared(lambda key: Step.objects.filter(key=key, updated_at__lt=dt.datetime.now(dt.UTC)))
    with pytest.raises(AssertionError, match="computed from a value or the clock"):
        clocked("charge")
    unused = Prepared(lambda instance_id, key: Step.objects.filter(instance_id=instance_id))
    with pytest.raises(AssertionError, match="does not reach the SQL"):
        unused(workflow.id, "charge")
    with pytest.raises(TypeError, match="not True"):
        Prepared(lambda paused: WorkflowInstance.objects.filter(paused=paused))(True)
    related = Prepared(lambda key: workflow.steps.filter(key=key))
    with pytest.raises(AssertionError, match="related manager"):
        related("charge")


@pytest.mark.parametrize("descending", [True, False])
def test_prepared_pages_are_the_keyset_pages_across_ties(workflow, descending):
    for n, c in enumerate("abcdefg"):
        SignalFactory(workflow=workflow, id=c * 32, accepted_at=T0 + dt.timedelta(seconds=n // 3))
    SignalFactory(accepted_at=T0)  # another workflow's
    keyset, prepared, after = [], [], None
    while True:
        page = keyset_page(_signals(workflow.id), kind=SIGNALS, after=after, limit=3, descending=descending)
        same = prepared_page(_signals, (workflow.id,), kind=SIGNALS, after=after, limit=3, descending=descending)
        assert same.next_key == page.next_key
        keyset.append([s.id for s in page.items]), prepared.append([s.id for s in same.items])
        if page.next_key is None:
            break
        after = page.next_key
    assert prepared == keyset and sum(keyset, []) == sorted(sum(keyset, []), reverse=descending)
    assert len(sum(keyset, [])) == 7


def test_a_statement_may_leave_a_value_out_only_when_told(workflow):
    def compile_(values):
        sql, params = Step.objects.filter(instance_id=workflow.id).values("pk").query.sql_with_params()
        return sql, list(params), None

    with pytest.raises(AssertionError, match="does not reach the SQL"):
        compile_once("steps", (dt.datetime,), compile_)
    statement, _ = compile_once("steps", (dt.datetime,), compile_, all_used=False)
    assert statement.params([T0]) == [workflow.id] and statement.places == (None,)
