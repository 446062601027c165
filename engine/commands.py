"""What the engine's command services share beyond ``core.fields`` and ``history.idempotency``."""

import re
from typing import Any

from core import fields, limits
from core.fields import command_object, is_text  # noqa: F401 - the names the engine's modules import

# The Idempotency-Key syntax as the OpenAPI document states it (history.idempotency.key_check decides).
IDEMPOTENCY_KEY = re.compile(f"[\\x21-\\x7e]{{1,{limits.MAX_IDEMPOTENCY_KEY}}}")


def id_argument(value: Any, field: str) -> str:
    """An id from a path or a command (the argument order of the engine's call sites)."""
    return fields.identifier(field, value)
