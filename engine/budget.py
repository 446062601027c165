"""The attempt budget a step's tasks share, first run and the operator's re-runs together.

A TASK step's budget is its definition's max_attempts; a POLL step's, per business round, the
activation's frozen attempts_per_round. The tasks of one chain (a task and the tasks retrying it)
split it: the first task gets the whole budget, each retry what its predecessor left (its
max_attempts less the attempts it ran). A task runs again while it has attempts left; a chain is
re-run while attempts are left and it ran fewer activations than its budget has attempts.
"""

from dataclasses import dataclass

from django.db.models import Exists, F, OuterRef, QuerySet

from history.models import Activation, Step, StepKind, Task


def attempt_budget(*, spec: dict, activation: Activation | None) -> int:
    """The attempts one chain of the step may run: TASK the definition's, POLL the round's frozen limit."""
    if spec["kind"] == StepKind.POLL:
        return (activation.attempts_per_round if activation else None) or 1
    return spec.get("max_attempts", 1)


def attempts_left(task: Task) -> int:
    """What a task has left of its max_attempts; a retry of it gets exactly this."""
    return task.max_attempts - task.attempt_count


def link_max_attempts(*, budget: int, previous: Task | None) -> int:
    """The max_attempts of a chain's task: the whole budget for the first, what ``previous`` left for a retry."""
    return budget if previous is None else attempts_left(previous)


def predecessor_left_exactly(predecessor: QuerySet[Task]) -> Exists:
    """``link_max_attempts`` in SQL for a retry's row: ``predecessor`` (the task it retries, correlated with
    OuterRef) left it its max_attempts. Written as a sum so unsigned columns never go below zero."""
    return Exists(predecessor.filter(max_attempts=OuterRef("max_attempts") + F("attempt_count")))


@dataclass(frozen=True)
class Budget:
    """A chain's budget and what it used: the attempts its tasks ran and the activations it took."""

    total: int
    used: int
    activations: int

    @property
    def remaining(self) -> int:
        return self.total - self.used

    def refusal(self) -> str | None:
        """Why the chain may not run again, or None."""
        if self.remaining <= 0:
            return f"the attempt budget is spent: {self.used} of {self.total} attempts used"
        if self.activations >= self.total:
            return f"{self.activations} of at most {self.total} activations already ran"
        return None


def task_step_budget(*, step: Step, spec: dict, task: Task) -> Budget:
    """A TASK step's chain as its counters count it: every task of the step shares the definition's budget;
    the attempts are those of the earlier activations' tasks and of ``task``, the current activation's."""
    used = step.attempts_before + task.attempt_count
    return Budget(total=attempt_budget(spec=spec, activation=None), used=used, activations=step.activation_count)
