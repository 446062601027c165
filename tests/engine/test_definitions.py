import json

import pytest
from django.core.management import CommandError, call_command

from core.errors import AlreadyExists, InvalidArgument
from engine.definitions import definition_create, definition_of
from history.models import WorkflowDefinition
from history.selectors.access import definitions_kept
from testkit.driver import task_step

POLL = {
    "key": "settle",
    "kind": "POLL",
    "handler": "demo.poll_pending",
    "queue": "polls",
    "max_rounds": 3,
    "interval_seconds": 60,
    "poll_deadline_seconds": 3600,
    "mapping": {"field": "status", "values": {"done": "SUCCEEDED", "pending": "PENDING", "failed": "FAILED"}},
}


def _refused(engine, steps, **extra):
    with pytest.raises(InvalidArgument) as caught:
        engine.define(steps, **extra)
    assert WorkflowDefinition.objects.count() == 0
    return caught.value.field


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([task_step("-bad")], "steps[0].key"),
        ([task_step("x" * 65)], "steps[0].key"),
        ([task_step("$root")], "steps[0].key"),
        ([task_step("a"), task_step("a")], "steps[1].key"),
        ([task_step("a", after=["ghost"])], "steps[0].after[0]"),
        ([task_step("a", after=["b"]), task_step("b", after=["a"])], "steps[0].after"),
        ([task_step("a", after=["a"])], "steps[0].after[0]"),
        ([task_step("a", queue="nowhere")], "steps[0].queue"),
        ([task_step("a", max_attempts=0)], "steps[0].max_attempts"),
        ([task_step("a", colour="red")], "steps[0].colour"),
        ([task_step("a", contract={"type": "no-such-type"})], "steps[0].contract"),
        ([{k: v for k, v in POLL.items() if k != "mapping"}], "steps[0].mapping"),
        ([{**POLL, "mapping": {"field": "status", "values": {"x": "MAYBE"}}}], "steps[0].mapping.values.x"),
        ([{"key": "s", "kind": "SIGNAL", "name": "go", "payload_version": "1"}], "steps[0].deadline_seconds"),
        ([{"key": "t", "kind": "WAIT"}], "steps[0].kind"),
    ],
)
def test_definition_validation_names_the_offending_field(engine, steps, field):
    assert _refused(engine, steps) == field


def test_definition_needs_a_known_application(engine):
    with pytest.raises(InvalidArgument) as caught:
        definition_create(namespace_id=engine.namespace.id, document={"name": "x", "application": "nope", "steps": []})
    assert caught.value.field == "application"


def test_a_definition_is_stored_normalised_with_sorted_queues(engine):
    definition = engine.define([POLL, task_step("charge", after=["settle"])])
    assert definition.queues == ["payments", "polls"]
    charge = definition.step_spec("charge")
    assert charge == {
        "key": "charge",
        "kind": "TASK",
        "after": ["settle"],
        "handler": "demo.echo",
        "queue": "payments",
        "priority": 0,
        "max_attempts": 1,
        "deadline_seconds": 86400,
        "latest_start_seconds": None,
        "contract": {},
    }
    settle = definition.step_spec("settle")
    assert (
        settle["attempts_per_round"] == 1 and settle["final_signal"] is None and settle["round_deadline_seconds"] == 300
    )


def test_definitions_are_immutable_a_new_version_is_a_new_row(engine):
    first = engine.define([task_step("a")], name="pay")
    second = engine.define([task_step("a"), task_step("b")], name="pay")
    assert (first.version, second.version) == (1, 2)
    assert WorkflowDefinition.objects.get(pk=first.id).spec == first.spec
    with pytest.raises(AlreadyExists):
        engine.define([task_step("a")], name="pay", version=2)


def test_the_engine_reads_a_definition_once_per_process_and_keeps_a_bounded_number(
    engine, django_assert_num_queries, monkeypatch
):
    monkeypatch.setattr(definitions_kept, "kept", {})
    monkeypatch.setattr(definitions_kept, "most", 2)
    instances = [engine.start(engine.define([task_step("a")])) for _ in range(3)]
    with django_assert_num_queries(1):
        first = definition_of(instances[0])
    with django_assert_num_queries(0):
        assert definition_of(instances[0]) is first
    assert first == WorkflowDefinition.objects.get(pk=instances[0].definition_id)
    for instance in instances[1:]:
        definition_of(instance)
    assert len(definitions_kept.kept) <= 2


def test_weave_define_loads_a_file_and_names_the_field_of_a_bad_one(engine, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"name": "pay", "application": "billing", "steps": [task_step("a")]}))
    call_command("weave_define", str(good), "--namespace", "acme", "--json")
    assert json.loads(capsys.readouterr().out)["version"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "pay", "application": "billing", "steps": [task_step("a", after=["zz"])]}))
    with pytest.raises(CommandError, match=r"steps\[0\]\.after\[0\]"):
        call_command("weave_define", str(bad), "--namespace", "acme")
    assert WorkflowDefinition.objects.count() == 1


def test_the_example_definition_loads(db, capsys):
    from pathlib import Path

    from history.tenancy import namespace_ensure

    namespace_ensure(name="shop", application="default", queues=["payments"])
    example = Path(__file__).resolve().parents[2] / "examples" / "definitions" / "payment.json"
    call_command("weave_define", str(example), "--namespace", "shop", "--json")
    loaded = json.loads(capsys.readouterr().out)
    assert (loaded["name"], loaded["queues"]) == ("payment", ["payments"])
