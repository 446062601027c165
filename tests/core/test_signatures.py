"""Failure signatures: errors that differ only in their ids, numbers and times share a pattern; others do not."""

import datetime as dt
import string
import uuid

from hypothesis import given
from hypothesis import strategies as st

from core.signatures import MAX_PATTERN, error_pattern, signature_id

# Message words: letters only, so a word is never read as an id or a number.
words = st.lists(st.text(alphabet=string.ascii_lowercase + " ", min_size=1, max_size=12), min_size=1, max_size=4)
hex_ids = st.uuids().map(lambda u: u.hex)
variants = st.one_of(
    hex_ids,
    st.uuids().map(str),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda f: f"{f:.2f}"),
    st.datetimes(min_value=dt.datetime(2000, 1, 1)).map(lambda d: d.isoformat()),
    st.integers(min_value=0, max_value=10**6).map(lambda n: f"'acct-{n}'"),
)


def _message(parts: list[str], values: list[str]) -> str:
    return " ".join(f"{part} {value}" for part, value in zip(parts, values, strict=True))


@given(words, st.data())
def test_errors_that_differ_only_in_their_varying_parts_share_a_pattern(parts, data):
    first = data.draw(st.lists(variants, min_size=len(parts), max_size=len(parts)))
    second = data.draw(st.lists(variants, min_size=len(parts), max_size=len(parts)))
    assert error_pattern(_message(parts, first)) == error_pattern(_message(parts, second))


@given(words, words)
def test_different_messages_do_not_share_a_pattern(first, second):
    one, other = " ".join(first).split(), " ".join(second).split()
    if one != other:
        assert error_pattern(" ".join(first)) != error_pattern(" ".join(second))


def test_the_pattern_names_what_it_replaced_and_keeps_the_words():
    text = (
        f"charge {uuid.uuid4().hex} for 'acct-77' failed at 2026-12-05T10:00:00Z: "
        'amount 10.50 over limit 10, {"error": "declined"}'
    )
    assert error_pattern(text) == 'charge <*> for <*> failed at <*>: amount <*> over limit <*>, {"error": "declined"}'
    assert error_pattern("x" * 2000) == "x" * MAX_PATTERN


def test_a_signature_is_where_and_what():
    where = {"namespace_id": "n" * 32, "definition_id": "d" * 32, "step_key": "charge", "cause": "task_outcome_unknown"}
    key = signature_id(**where, pattern="timeout")
    assert key == signature_id(**where, pattern="timeout") and len(key) == 32
    assert key != signature_id(**where | {"step_key": "refund"}, pattern="timeout")
    assert key != signature_id(**where, pattern="declined")
