"""Recovery commands as a client sends them, for a given state, with overrides."""

from history import exactjson
from history.models import Activation, Step
from tests.recovery.states import State

REASON = "verified with the payment provider"
EVIDENCE = "ticket:OPS-123"
PAID = object()  # the default result: {"paid": true}


def _common(state: State) -> dict:
    state.instance.refresh_from_db()
    return {"expected_revision": str(state.instance.revision), "reason": REASON, "evidence_ref": EVIDENCE}


def _decision(state: State, key: str | None) -> dict:
    step = Step.objects.get(instance=state.instance, key=key or state.step.key)
    return {
        "step_key": step.key,
        "activation_id": step.current_activation_id,
        "expected_step_revision": str(step.revision),
    }


def parsed(command: dict) -> dict:
    """The command as the API parser hands it over (numbers kept exact)."""
    return exactjson.loads(exactjson.dumps(command))


def review(state: State, *, task=None, conclusion="SUCCEEDED", result=PAID, **overrides) -> dict:
    task = task or state.task
    task.refresh_from_db()
    command = _common(state) | {
        "task_id": task.id,
        "expected_task_revision": str(task.revision),
        "execution_settled": True,
        "conclusion": conclusion,
        "result": {"paid": True} if result is PAID else result,
    }
    return parsed(command | overrides)


def resolve(state: State, *, key=None, conclusion="SUCCEEDED", result=PAID, **overrides) -> dict:
    command = _common(state) | _decision(state, key) | {"execution_settled": True, "conclusion": conclusion}
    command["result"] = {"paid": True} if result is PAID else result
    return parsed(command | overrides)


def retry(state: State, *, key=None, **overrides) -> dict:
    return parsed(_common(state) | _decision(state, key) | {"safe_to_retry": True} | overrides)


def continue_poll(state: State, *, key=None, **overrides) -> dict:
    return parsed(_common(state) | _decision(state, key) | {"pending_confirmed": True} | overrides)


def rearm(state: State, *, key=None, **overrides) -> dict:
    return parsed(_common(state) | _decision(state, key) | {"wait_verified": True} | overrides)


def continue_(state: State, **overrides) -> dict:
    return parsed(_common(state) | {"review_resolved": True} | overrides)


def current_activation(state: State, key: str | None = None) -> Activation:
    step = Step.objects.get(instance=state.instance, key=key or state.step.key)
    return Activation.objects.get(pk=step.current_activation_id)


def run(service, identity, state: State, command: dict, key: str = "key-1"):
    return service(identity=identity, instance_id=state.instance.id, idempotency_key=key, command=command)
