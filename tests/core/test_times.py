"""The one time format of every answer: RFC 3339 in UTC with ``Z``, a fraction of 6 digits only when not zero."""

import datetime as dt

from core.times import format_optional_time, format_time

PLUS_8 = dt.timezone(dt.timedelta(hours=8))


def test_a_whole_second_has_no_fraction():
    assert format_time(dt.datetime(2026, 9, 18, 8, 0, 0, tzinfo=dt.UTC)) == "2026-09-18T08:00:00Z"


def test_a_fraction_has_exactly_six_digits():
    assert format_time(dt.datetime(2026, 9, 18, 8, 0, 0, 1, tzinfo=dt.UTC)) == "2026-09-18T08:00:00.000001Z"
    assert format_time(dt.datetime(2026, 9, 18, 8, 0, 0, 250000, tzinfo=dt.UTC)) == "2026-09-18T08:00:00.250000Z"


def test_another_zone_is_written_in_utc():
    assert format_time(dt.datetime(2026, 9, 18, 3, 30, 0, 5, tzinfo=PLUS_8)) == "2026-09-17T19:30:00.000005Z"


def test_an_absent_time_stays_absent():
    assert format_optional_time(None) is None
    assert format_optional_time(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) == "2026-01-01T00:00:00Z"
