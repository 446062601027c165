import json
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from core import exactjson


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
    from core.ids import is_id, is_step_key, parse_revision

    number = exactjson.loads("[7]")[0]
    assert parse_revision(number) is None and parse_revision("7") == 7
    assert not is_step_key(exactjson.loads("[12]")[0]) and is_step_key("12")
    assert not is_id(exactjson.loads("[" + "1" * 32 + "]")[0]) and is_id("1" * 32)


def _raises(error: type, call) -> ValueError:
    try:
        call()
    except error as exc:
        assert isinstance(exc, ValueError)
        return exc
    raise AssertionError(f"{error.__name__} was not raised")


def test_nesting_up_to_the_limit_is_parsed_and_one_level_more_is_refused():
    from core.limits import MAX_JSON_DEPTH

    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert exactjson.dumps(exactjson.loads(deepest)) == deepest
    too_deep = '{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1)
    assert str(MAX_JSON_DEPTH) in str(_raises(exactjson.TooDeep, lambda: exactjson.loads(too_deep)))


def test_a_hundred_thousand_levels_are_refused_without_recursing():
    _raises(exactjson.TooDeep, lambda: exactjson.loads("[" * 100_000 + "]" * 100_000))
    _raises(exactjson.TooDeep, lambda: exactjson.loads(b"[" * 100_000))


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = '{"a":"' + "[" * 500 + '","b":"\\"{{{{","c":[["]]]]"]]}'
    assert exactjson.dumps(exactjson.loads(text)) == text


def test_number_literals_longer_than_the_limit_are_refused_and_never_converted():
    from core.limits import MAX_NUMBER_CHARS

    assert exactjson.loads("9" * MAX_NUMBER_CHARS) == "9" * MAX_NUMBER_CHARS
    for literal in ("9" * (MAX_NUMBER_CHARS + 1), "1." + "0" * MAX_NUMBER_CHARS, "9" * 5000):
        _raises(exactjson.NumberTooLong, lambda literal=literal: exactjson.loads(f'{{"n":{literal}}}'))
    # A value built elsewhere (not through loads) is still never converted.
    _raises(exactjson.NumberTooLong, lambda: exactjson.to_python({"n": exactjson.Number("9" * 5000)}))


def test_writers_refuse_nesting_built_outside_loads_instead_of_recursing():
    value: list = []
    for _ in range(10_000):
        value = [value]
    for write in (exactjson.dumps, exactjson.canonical, exactjson.to_python):
        _raises(exactjson.TooDeep, lambda write=write: write(value))


def test_the_writer_refuses_nan_and_infinity():
    for bad in (float("nan"), float("inf"), float("-inf"), *map(Decimal, ("NaN", "sNaN", "Infinity", "-Inf"))):
        for value in (bad, [1, bad], {"amount": bad}):
            for write in (exactjson.dumps, exactjson.canonical, exactjson.ExactEncoder().encode, exactjson.to_python):
                _raises(ValueError, lambda write=write, value=value: write(value))
    assert exactjson.dumps([0.5, -0.0, 1e16]) == "[0.5,-0.0,1e+16]"


def test_checks_read_numbers_exactly_never_as_floats():
    values = exactjson.to_python(exactjson.loads("[19.99,0.30000000000000001,12345678901234567890123,1e400,-0.0]"))
    assert values == [Decimal("19.99"), Decimal("0.30000000000000001"), 12345678901234567890123, Decimal("1e400"), 0]
    assert [type(v).__name__ for v in values] == ["ExactDecimal", "ExactDecimal", "int", "ExactDecimal", "ExactDecimal"]
    assert exactjson.to_python([0.1, 2.5e-7]) == [Decimal("0.1"), Decimal("2.5e-7")]  # a Python float: its JSON text


def test_decimals_are_written_as_their_exact_text_and_read_back_exactly():
    text = '{"cent":0.01,"money":19.990,"far":1e99999999999999999999,"n":1,"tiny":1.5e-7}'
    value = exactjson.to_python(exactjson.loads(text))
    written = exactjson.dumps(value)
    assert written == '{"cent":0.01,"money":19.990,"far":1E+99999999999999999999,"n":1,"tiny":1.5E-7}'
    assert json.loads(written, cls=exactjson.ExactDecoder) == value
    assert exactjson.to_python(exactjson.loads(written)) == value


@given(json_values, st.booleans())
def test_the_sorted_and_indented_layouts_match_the_standard_library(value, sort_keys):
    expected = json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=False)
    assert exactjson.dumps(value, sort_keys=sort_keys, indent=2) == expected
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert exactjson.canonical(value) == canonical
