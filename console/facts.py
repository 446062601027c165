"""The facts a decision on the step in review needs, from the rows the instance page already read."""

from dataclasses import dataclass, field

from core import exactjson
from engine.definitions import poll_classify
from history import models
from history.selectors.instance_page import ActivationView, InstancePage


@dataclass
class TaskFacts:
    task: models.Task
    attempts: list[models.Attempt]
    # Why the task stopped where it did, in words; blank while it runs.
    budget: str
    # POLL: how the step's mapping classifies the task's answer ("" when it has none).
    classification: str = ""


@dataclass
class DecisionFacts:
    step: models.Step
    spec: dict
    activation: ActivationView | None
    tasks: list[TaskFacts] = field(default_factory=list)
    signals: list[models.Signal] = field(default_factory=list)

    @property
    def definition(self) -> str:
        """The step as its definition declares it (handler, queue, budget, deadlines, mapping, contract)."""
        return exactjson.dumps(self.spec, sort_keys=True, indent=2)


def decision_facts(page: InstancePage) -> DecisionFacts | None:
    """The review step's definition, current activation, each task with its attempts and budget in words, the
    POLL answers as the mapping reads them, and the signals aimed at the step; None outside a step review."""
    key = page.instance.review_step_key
    view = next((v for v in page.steps if v.step.key == key), None)
    if view is None:
        return None
    spec = next((s for s in page.instance.definition.spec.get("steps", []) if s.get("key") == key), {})
    current = next((a for a in view.activations if a.activation.id == view.step.current_activation_id), None)
    facts = DecisionFacts(step=view.step, spec=spec, activation=current)
    for task in current.tasks if current else []:
        attempts = current.attempts.get(task.id, [])
        answer = ""
        if view.step.kind == models.StepKind.POLL and task.result is not None and task.outcome == "SUCCEEDED":
            answer = poll_classify(step_spec=spec, result_text=task.result) or "unmapped (matches no value)"
        facts.tasks.append(
            TaskFacts(task=task, attempts=attempts, budget=_budget(task, attempts), classification=answer)
        )
    facts.signals = [s for s in page.signals if s.target_step_key == key]
    return facts


def _budget(task: models.Task, attempts: list[models.Attempt]) -> str:
    used = f"{task.attempt_count} of {task.max_attempts} attempts used"
    last = attempts[-1] if attempts else None
    if last is None:
        return f"not claimed yet ({used})"
    if last.state == models.AttemptState.UNKNOWN:
        return (
            f"attempt {last.number}'s lease expired: its outcome is unknown, so the task never retries by itself "
            f"(the work may still be running); {used}"
        )
    if task.state != models.TaskState.FAILED:
        return used
    if not last.retryable:
        return f"attempt {last.number} failed and its worker said it is not retryable, so no attempt followed; {used}"
    if task.attempt_count >= task.max_attempts:
        return f"attempt {last.number} failed (retryable) with no attempt left; {used}"
    return f"attempt {last.number} failed (retryable) after the task's deadline, so no attempt followed; {used}"
