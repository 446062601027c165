import json

from hypothesis import given
from hypothesis import strategies as st

from history import exactjson


def test_numbers_come_back_as_written():
    text = '{"a":1.10,"b":12345678901234567890123,"c":1e5,"d":-0.0,"e":[1.000,2]}'
    assert exactjson.dumps(exactjson.loads(text)) == text


def test_explicit_null_is_kept_apart_from_absent():
    assert exactjson.dumps(exactjson.loads("null")) == "null"
    assert exactjson.loads('{"output":null}') == {"output": None}


def test_duplicate_keys_are_refused():
    try:
        exactjson.loads('{"a":1,"a":2}')
    except exactjson.DuplicateKeyError:
        return
    raise AssertionError("duplicate keys were accepted")


def test_nan_is_not_json():
    for text in ("NaN", "Infinity", "[-Infinity]"):
        try:
            exactjson.loads(text)
        except ValueError:
            continue
        raise AssertionError(f"{text} was accepted")


def test_raw_text_is_embedded_verbatim():
    assert exactjson.dumps({"input": exactjson.Raw('{"x":1.50}')}) == '{"input":{"x":1.50}}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_values)
def test_round_trip_matches_the_standard_library(value):
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert exactjson.dumps(exactjson.loads(text)) == text


def test_a_json_number_is_never_taken_for_an_id_key_or_revision():
    from history.ids import is_id, is_step_key, parse_revision

    number = exactjson.loads("[7]")[0]
    assert parse_revision(number) is None and parse_revision("7") == 7
    assert not is_step_key(exactjson.loads("[12]")[0]) and is_step_key("12")
    assert not is_id(exactjson.loads("[" + "1" * 32 + "]")[0]) and is_id("1" * 32)
