"""The six recovery commands as validated, immutable values (SPEC §5.1).

A command is a flat JSON object (``history.exactjson.loads`` output). Every field is checked
here, before anything is read from the database; each violation is INVALID_ARGUMENT naming
the field. Numbers arrive as ``exactjson.Number`` (a ``str`` subclass), so every text field
refuses them explicitly: a revision sent as the JSON number 7 is not the decimal string "7".
"""

import hashlib
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from history import exactjson
from history.errors import InvalidArgument
from history.ids import ROOT_STEP_KEY, is_id, is_step_key, parse_revision

CONCLUSIONS = ("SUCCEEDED", "FAILED")
MAX_REASON = 1024
MAX_EVIDENCE_REF = 512
MAX_IDEMPOTENCY_KEY = 128


def _is_text(value: object) -> bool:
    return type(value) is str


def _has_surrogate(text: str) -> bool:
    # A lone surrogate (valid in JSON escapes, invalid in UTF-8) cannot be stored.
    return any(unicodedata.category(ch) == "Cs" for ch in text)


def _revision(field: str, value: object) -> int:
    number = parse_revision(value) if _is_text(value) else None
    if number is None:
        raise InvalidArgument(
            f'{field} must be a decimal string of a revision between 1 and 2^64-1, e.g. "7"', field=field
        )
    return number


def _reason(field: str, value: object) -> str:
    if (
        not _is_text(value)
        or not 1 <= len(value) <= MAX_REASON
        or value.strip() == ""
        or "\x00" in value
        or _has_surrogate(value)
    ):
        raise InvalidArgument(f"{field} must be 1 to {MAX_REASON} characters, not all whitespace, no NUL", field=field)
    return value


def _evidence_ref(field: str, value: object) -> str:
    if (
        not _is_text(value)
        or not 1 <= len(value) <= MAX_EVIDENCE_REF
        or any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cs") for ch in value)
    ):
        raise InvalidArgument(
            f"{field} must be 1 to {MAX_EVIDENCE_REF} characters without whitespace or control characters",
            field=field,
        )
    return value


def _id(field: str, value: object) -> str:
    if not is_id(value) or not _is_text(value):
        raise InvalidArgument(f"{field} must be 32 lowercase hexadecimal characters", field=field)
    return value


def _step_key(field: str, value: object) -> str:
    if value == ROOT_STEP_KEY:
        raise InvalidArgument(f"{field}: the internal root step cannot be named", field=field)
    if not _is_text(value) or not is_step_key(value):
        raise InvalidArgument(
            f"{field} must be 1-64 ASCII characters: a letter or digit, then letters, digits, '_', '.' or '-'",
            field=field,
        )
    return value


def _declaration(field: str, value: object) -> bool:
    if value is not True:
        raise InvalidArgument(f"{field} must be the JSON value true", field=field)
    return True


def _conclusion(field: str, value: object) -> str:
    if not _is_text(value) or value not in CONCLUSIONS:
        raise InvalidArgument(f"{field} must be SUCCEEDED or FAILED", field=field)
    return value


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
    text = exactjson.dumps(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{field} holds a lone surrogate escape, which is not valid Unicode", field=field
        ) from None
    return ExactResult(text=text, value=value)


_CHECKS: dict[str, Callable[[str, object], Any]] = {
    "expected_revision": _revision,
    "reason": _reason,
    "evidence_ref": _evidence_ref,
    "task_id": _id,
    "expected_task_revision": _revision,
    "step_key": _step_key,
    "activation_id": _id,
    "expected_step_revision": _revision,
    "execution_settled": _declaration,
    "safe_to_retry": _declaration,
    "pending_confirmed": _declaration,
    "wait_verified": _declaration,
    "review_resolved": _declaration,
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
        if not isinstance(raw, dict):
            raise InvalidArgument("the command must be a JSON object")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise InvalidArgument(f"unknown field {unknown[0]!r}", field=unknown[0])
        values = {}
        for name in names:
            if name not in raw:
                raise InvalidArgument(f"{name} is required", field=name)
            values[name] = _CHECKS[name](name, raw[name])
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


def idempotency_key_check(value: object, *, field: str = "idempotency_key") -> str:
    """An idempotency key: 1 to 128 printable ASCII characters."""
    if not _is_text(value) or not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY or any(not " " <= ch <= "~" for ch in value):
        raise InvalidArgument(f"{field} must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters", field=field)
    return value


def instance_id_check(value: object) -> str:
    return _id("instance_id", value)


def command_fingerprint(*, operation: str, instance_id: str, raw: dict) -> str:
    """What makes two requests the same command: operation, instance and the canonical command text."""
    text = exactjson.canonical([operation, instance_id, raw])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
