"""Log lines that say whose work they are about: the request, the background pass, the namespace, the instance.

Code binds what it knows with ``log_context`` for the duration of a block; ``ContextFilter`` (installed on the
handler in the settings' LOGGING) copies it onto every record logged inside, whichever logger wrote it, so no id
is passed around by hand. ``WEAVE_LOG_FORMAT=json`` writes each record as one JSON object per line
(``json_formatter``); ``plain``, for a terminal, writes the message alone.
"""

import contextvars
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

# The fields a block can bind, in the order a JSON line shows them.
FIELDS = ("request_id", "pass_id", "namespace", "instance")

# Never changed in place: each block binds a new mapping, and leaving it puts the enclosing one back.
_bound: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "weave_log_context", default=MappingProxyType({})
)

access = logging.getLogger("weave.http")


@contextmanager
def log_context(
    *,
    request_id: str | None = None,
    pass_id: str | None = None,
    namespace: str | None = None,
    instance: str | None = None,
) -> Iterator[None]:
    """Every line logged inside the block carries the fields given (None: leave as the enclosing block has it)."""
    given = {"request_id": request_id, "pass_id": pass_id, "namespace": namespace, "instance": instance}
    token = _bound.set(_bound.get() | {name: value for name, value in given.items() if value is not None})
    try:
        yield
    finally:
        _bound.reset(token)


def bound() -> dict[str, str]:
    """The fields bound where this runs."""
    return dict(_bound.get())


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (a field the record already has is kept)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = bound()
        # Django logs a 4xx/5xx answer after the last middleware has returned, outside the request's
        # block; its record carries the request, which carries the id.
        request_id = getattr(getattr(record, "request", None), "weave_request_id", None)
        if request_id is not None:
            fields.setdefault("request_id", request_id)
        for name, value in fields.items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def json_formatter() -> JsonFormatter:
    """One JSON object per line: timestamp, level, logger, message, the bound fields and a call's ``extra``."""
    return JsonFormatter(
        ["levelname", "name", "message"],
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
        # Django's request records carry the request object: its path is already in the message.
        reserved_attrs=[*RESERVED_ATTRS, "request"],
    )


def access_log(*, method: str, route: str, status: int, seconds: float, request_id: str) -> None:
    """The web process's line for one answered request (the route is the URL pattern, never the raw path)."""
    duration_ms = round(seconds * 1000, 1)
    access.info(
        "%s %s %s %sms request_id=%s",
        method,
        route,
        status,
        duration_ms,
        request_id,
        extra={"method": method, "route": route, "status": status, "duration_ms": duration_ms},
    )
