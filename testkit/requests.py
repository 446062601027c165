"""Recovery commands as a client sends them, for a given state, with overrides."""

from core import exactjson
from history.models import Activation, Step
from testkit.states import State

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


def cases():
    """Each operation with a state it succeeds on and its command builder: (name, service, build, make)."""
    from recovery.operations import (
        instance_continue,
        poll_continue,
        step_resolve,
        step_retry,
        task_review,
        wait_rearm,
    )
    from testkit import states

    return [
        ("review-task", task_review, review, states.task_unknown_state),
        ("resolve-step", step_resolve, resolve, states.task_reviewed_state),
        ("continue-poll", poll_continue, continue_poll, states.poll_pending_reviewed_state),
        ("rearm-wait-signal", wait_rearm, rearm, states.signal_contract_violation_state),
        ("rearm-wait-timer", wait_rearm, rearm, states.timer_late_state),
        ("continue", instance_continue, continue_, states.task_resolved_state),
        ("retry-step-task", step_retry, retry, states.task_failed_state),
        ("retry-step-poll", step_retry, retry, states.poll_round_failed_state),
        ("retry-step-final-signal", step_retry, retry, states.poll_final_signal_violation_state),
    ]
