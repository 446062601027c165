"""The one time format of every answer: RFC 3339 in UTC with ``Z``."""

import datetime as dt


def format_time(value: dt.datetime) -> str:
    """``2026-09-18T08:00:00Z`` without a fraction when it is zero, else exactly 6 digits."""
    utc = value.astimezone(dt.UTC)
    if utc.microsecond:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_optional_time(value: dt.datetime | None) -> str | None:
    """``format_time`` of a time; an absent time stays absent (JSON null)."""
    return None if value is None else format_time(value)
