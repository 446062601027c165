"""A step's fixed result contract and a POLL step's fixed mapping, as the engine applies them.

The engine owns the definition format (``engine.definitions``); recovery judges an operator's
result by the very same rules the background used on the original results.
"""

from core.errors import InvalidArgument
from engine.definitions import contract_violation
from engine.definitions import poll_classify as engine_poll_classify
from recovery.commands import ExactResult


def result_contract_check(*, spec: dict, result: ExactResult, field: str = "result") -> None:
    """Refuse a SUCCEEDED result that breaks the step's fixed contract."""
    reason = contract_violation(step_spec=spec, value_text=result.text)
    if reason is not None:
        raise InvalidArgument(f"{field} breaks the step's result contract: {reason}", field=field)


def poll_classify(*, spec: dict, result: ExactResult) -> str | None:
    """The business classification of a query result under the fixed mapping, None when unmapped."""
    return engine_poll_classify(step_spec=spec, result_text=result.text)
