"""Failure signatures: errors that differ only in their ids, numbers and times share a pattern; others do not."""

import datetime as dt
import json
import string
import uuid

from hypothesis import given
from hypothesis import strategies as st

from core.signatures import MAX_PATTERN, error_pattern, result_pattern, signature_id

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


@given(words, st.data(), st.integers(min_value=0, max_value=10**9))
def test_reported_results_that_differ_only_in_their_varying_parts_share_a_pattern(parts, data, amount):
    first = data.draw(st.lists(variants, min_size=len(parts), max_size=len(parts)))
    second = data.draw(st.lists(variants, min_size=len(parts), max_size=len(parts)))
    one = json.dumps({"error": _message(parts, first), "amount": amount})
    other = json.dumps({"amount": amount + 1, "error": _message(parts, second)})
    assert result_pattern(one) == result_pattern(other)


@given(words, words)
def test_reported_results_with_different_messages_do_not_share_a_pattern(first, second):
    """A message holding a number stays its words: the result is not one quoted value to the patterns."""
    one, other = " ".join(first).split(), " ".join(second).split()
    if one != other:
        assert result_pattern(json.dumps({"error": f"{' '.join(first)} 42"})) != result_pattern(
            json.dumps({"error": f"{' '.join(second)} 42"})
        )


def test_a_result_that_is_not_json_is_patterned_as_text():
    assert result_pattern("timeout after 30 s") == error_pattern("timeout after 30 s") == "timeout after <*> s"
    assert result_pattern('{"ok": true, "code": null}') == '{"code": null, "ok": true}'
