"""The six recovery commands as validated, immutable values.

A command is a flat JSON object (``core.exactjson.loads`` output). Every field is checked
here, by the rules of ``core.fields`` the engine's commands share, before anything is read
from the database; each violation is INVALID_ARGUMENT naming the field.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from core import fields as field_rules
from core.errors import InvalidArgument

CONCLUSIONS = ("SUCCEEDED", "FAILED")


def _conclusion(field: str, value: object) -> str:
    return field_rules.choice(field, value, CONCLUSIONS)


@dataclass(frozen=True)
class ExactResult:
    """A client result: its exact text and its parsed value (for contract checks)."""

    text: str
    value: Any

    @property
    def is_null(self) -> bool:
        return self.text == "null"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def _result(field: str, value: object) -> ExactResult:
    return ExactResult(text=field_rules.json_text(field, value), value=value)


_CHECKS: dict[str, Callable[[str, object], Any]] = {
    "expected_revision": field_rules.revision,
    "reason": field_rules.reason,
    "evidence_ref": field_rules.token,
    "task_id": field_rules.identifier,
    "expected_task_revision": field_rules.revision,
    "step_key": field_rules.step_key,
    "activation_id": field_rules.identifier,
    "expected_step_revision": field_rules.revision,
    "execution_settled": field_rules.declaration,
    "safe_to_retry": field_rules.declaration,
    "pending_confirmed": field_rules.declaration,
    "wait_verified": field_rules.declaration,
    "review_resolved": field_rules.declaration,
    "conclusion": _conclusion,
    "result": _result,
}


@dataclass(frozen=True)
class Command:
    """Fields every command carries."""

    expected_revision: int
    reason: str
    evidence_ref: str

    @classmethod
    def parse(cls, raw: object) -> "Command":
        """Validate ``raw`` (a parsed JSON object) into this command, field by field in declared order."""
        names = [f.name for f in fields(cls)]
        field_rules.command_object(raw, allowed=names)
        values = {name: _CHECKS[name](name, field_rules.required(raw, name)) for name in names}
        command = cls(**values)
        command.check_combination()
        return command

    def check_combination(self) -> None:
        """Rules joining several fields; none by default."""


@dataclass(frozen=True)
class StepDecision(Command):
    """A decision about one step, taken on the activation the operator looked at."""

    step_key: str
    activation_id: str
    expected_step_revision: int


@dataclass(frozen=True)
class ReviewTaskCommand(Command):
    task_id: str
    expected_task_revision: int
    execution_settled: bool
    conclusion: str
    result: ExactResult

    def check_combination(self) -> None:
        if self.result.is_null:
            raise InvalidArgument("result must be a JSON value other than null", field="result")


@dataclass(frozen=True)
class ResolveStepCommand(StepDecision):
    execution_settled: bool
    conclusion: str
    result: ExactResult

    def check_combination(self) -> None:
        # A SUCCEEDED result is checked against the step's fixed contract once the step is known.
        if self.conclusion == "FAILED" and self.result.is_null:
            raise InvalidArgument(
                "a FAILED conclusion needs a result other than null (the failure details)", field="result"
            )


@dataclass(frozen=True)
class RetryStepCommand(StepDecision):
    safe_to_retry: bool


@dataclass(frozen=True)
class ContinuePollCommand(StepDecision):
    pending_confirmed: bool


@dataclass(frozen=True)
class RearmWaitCommand(StepDecision):
    wait_verified: bool


@dataclass(frozen=True)
class ContinueCommand(Command):
    review_resolved: bool


def instance_id_check(value: object) -> str:
    return field_rules.identifier("instance_id", value)
