"""Which recovery operations are possible now — a hook the recovery app fills in.

``history`` never imports ``recovery``. The instance detail asks this registry instead;
recovery calls ``register_eligibility`` when its app is ready. Until then (or in a
deployment without recovery) every instance reports ``{}``.
"""

from collections.abc import Callable, Sequence
from typing import Any

EligibilityFn = Callable[[Any, Sequence[Any]], dict]

_provider: EligibilityFn | None = None


def register_eligibility(fn: EligibilityFn) -> None:
    """Install ``fn(instance, steps) -> dict``; the last registration wins (one recovery app)."""
    global _provider
    _provider = fn


def eligibility_for(instance: Any, steps: Sequence[Any]) -> dict:
    """The eligibility document of ``instance``.

    ``steps`` are the instance's ``CurrentStep`` rows (``$root`` excluded, definition order),
    each with its step, current activation and that activation's task already loaded.
    """
    if _provider is None:
        return {}
    return _provider(instance, steps)
