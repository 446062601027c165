"""What a recovery command is: a validated, immutable value of fields from one vocabulary.

A command is a flat JSON object (``core.exactjson.loads`` output). Every field is checked
here, by the rules of ``core.fields`` the engine's commands share, before anything is read
from the database; each violation is INVALID_ARGUMENT naming the field. Each operation declares
its own command class beside its checks (``recovery.operations``).
"""

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar

from core import fields as field_rules

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
    "conclusion": _conclusion,
    "result": _result,
}


# A documented variant of a command: a field that is never null there.
NOT_NULL = "not null"


@dataclass(frozen=True)
class Declaration:
    """A fact the server cannot verify, which the operator declares true with one field set to true."""

    field: str
    asserts: str  # what the operator asserts, briefly (the API documentation)
    wording: str  # the full declaration beside the console's checkbox


EXECUTION_SETTLED = Declaration(
    "execution_settled",
    asserts="every historical execution has ended and will have no effect",
    wording=(
        "Every historical external execution has ended and will have no further effect. "
        "A lease expiry or an UNKNOWN result does not prove this."
    ),
)


@dataclass(frozen=True)
class Command:
    """Fields every command carries, and the declaration of its operation."""

    declaration: ClassVar[Declaration]
    # Field values that depend on each other, named by a suffix, for the API documentation:
    # a value is the one the field takes in that variant, or NOT_NULL. One unnamed variant: always so.
    variants: ClassVar[Mapping[str, Mapping[str, str]]] = MappingProxyType({})

    expected_revision: int
    reason: str
    evidence_ref: str

    @classmethod
    def parse(cls, raw: object) -> "Command":
        """Validate ``raw`` (a parsed JSON object) into this command, field by field in declared order."""
        names = [f.name for f in fields(cls)]
        field_rules.command_object(raw, allowed=names)
        checks = _CHECKS | {cls.declaration.field: field_rules.declaration}
        values = {name: checks[name](name, field_rules.required(raw, name)) for name in names}
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


def instance_id_check(value: object) -> str:
    return field_rules.identifier("instance_id", value)
