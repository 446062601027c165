from core import exactjson
from history.models import InstanceState
from testkit.driver import task_step


def test_a_two_step_task_workflow_runs_to_success(engine):
    definition = engine.define([task_step("a"), task_step("b", after=["a"])])
    instance = engine.start(definition, exactjson.loads('{"amount": 1.10}'))
    engine.settle()
    assert engine.work() is not None
    engine.settle()
    assert engine.work() is not None
    engine.settle()
    instance = engine.reload(instance)
    assert instance.state == InstanceState.SUCCEEDED
    assert instance.output == '{"a":{"amount":1.10},"b":{"amount":1.10}}'
