"""core.fields: one rule per kind of command field, each refusal INVALID_ARGUMENT "<field> must be …"."""

import pytest
from django.test import override_settings

from core import exactjson, fields, limits
from core.errors import InvalidArgument, PayloadTooLarge
from history.idempotency import fingerprint, key_check

HIDDEN = ["\x00", "\x07", "\x1b", "\x7f", "\x85", "\u00a0", "\u00ad", "\u200b", "\u200d", "\u200e", "\u202e"]
HIDDEN += ["\u2066", "\u2028", "\ufeff", "\ud800", "\udfff"]


def _refused(call, field: str) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        call()
    assert info.value.field == field
    assert info.value.message.startswith(f"{field} must be ") or info.value.message.startswith(f"{field} is ")
    return info.value


TEXT_CHECKS = {
    "reason": lambda v: fields.reason("reason", v),
    "business_key": lambda v: fields.text("business_key", v, max_length=256, blank=True),
    "correlation_key": lambda v: fields.text("correlation_key", v, max_length=256, blank=True),
    "worker": lambda v: fields.text("worker", v, max_length=128),
    "evidence_ref": lambda v: fields.token("evidence_ref", v),
}


@pytest.mark.parametrize("char", HIDDEN)
@pytest.mark.parametrize("field", sorted(TEXT_CHECKS))
def test_hidden_characters_surrogates_and_bidi_are_refused_in_every_text_field(field, char):
    error = _refused(lambda: TEXT_CHECKS[field](f"ok{char}ok"), field)
    assert "bidi" in error.message


def test_free_text_keeps_ordinary_spaces_tabs_newlines_and_any_script():
    assert fields.reason("reason", "line one\n\tline two — 已核对") == "line one\n\tline two — 已核对"
    assert fields.text("business_key", "", max_length=256, blank=True) == ""


@pytest.mark.parametrize("value", ["", "   ", " \t\n", "x" * (limits.MAX_REASON + 1), exactjson.Number("7"), None, 7])
def test_a_reason_is_1_to_1024_characters_not_blank_and_a_string(value):
    _refused(lambda: fields.reason("reason", value), "reason")


def test_the_reason_limit_itself_is_accepted():
    assert fields.reason("reason", "é" * limits.MAX_REASON) == "é" * limits.MAX_REASON


@pytest.mark.parametrize("value", ["", "a b", "a\tb", "x" * (limits.MAX_EVIDENCE_REF + 1), exactjson.Number("1")])
def test_an_evidence_ref_is_a_token(value):
    _refused(lambda: fields.token("evidence_ref", value), "evidence_ref")


@pytest.mark.parametrize(
    "value",
    [
        exactjson.Number("0"),
        exactjson.Number("-1"),
        exactjson.Number("1.5"),
        exactjson.Number("1e3"),
        exactjson.Number("9" * 250),
        exactjson.Number("4294967296"),
        "5",
        True,
        None,
        [1],
    ],
)
def test_an_integer_is_a_json_integer_in_range_and_long_literals_are_never_converted(value):
    _refused(lambda: fields.integer("version", value, low=1, high=2**32 - 1), "version")


def test_integers_in_range_are_accepted_from_json_or_python():
    assert fields.integer("version", exactjson.Number("4294967295"), low=1, high=2**32 - 1) == 2**32 - 1
    assert fields.integer("lease_seconds", 60, low=1, high=3600) == 60


@pytest.mark.parametrize("value", ["0", "007", "18446744073709551616", exactjson.Number("7"), "9" * 5000, 7])
def test_a_revision_is_a_decimal_string_up_to_2_64_minus_1(value):
    _refused(lambda: fields.revision("expected_revision", value), "expected_revision")


def test_ids_step_keys_declarations_and_choices():
    _refused(lambda: fields.identifier("task_id", "A" * 32), "task_id")
    _refused(lambda: fields.step_key("step_key", "$root"), "step_key")
    _refused(lambda: fields.declaration("safe_to_retry", exactjson.Number("1")), "safe_to_retry")
    _refused(lambda: fields.choice("outcome", "succeeded", ("SUCCEEDED", "FAILED")), "outcome")
    _refused(lambda: fields.boolean("retryable", "true"), "retryable")
    assert fields.identifier("task_id", "a" * 32) == "a" * 32


@pytest.mark.parametrize("value", [{"k": "\ud800"}, {"\udc00": 1}, ["\ud800"], "\udfff"])
def test_a_json_value_holding_a_lone_surrogate_in_a_value_or_a_key_is_refused(value):
    _refused(lambda: fields.json_text("payload", value), "payload")


@override_settings(WEAVE_MAX_JSON_BYTES=100)
def test_a_json_value_over_the_stored_size_is_413_naming_the_field_and_the_setting():
    assert fields.json_text("input", {"x": "é" * 46}) == '{"x":"' + "é" * 46 + '"}'  # 100 bytes as UTF-8
    with pytest.raises(PayloadTooLarge) as info:
        fields.json_text("input", {"x": "é" * 47})
    assert info.value.status == 413 and info.value.field == "input"
    assert "WEAVE_MAX_JSON_BYTES" in info.value.message and "100" in info.value.message


def test_a_command_is_an_object_without_unknown_fields():
    _refused(lambda: fields.command_object([], allowed=("a",)), "body")
    with pytest.raises(InvalidArgument) as info:
        fields.command_object({"c": 2, "a": 1, "b": 1}, allowed=("a",))
    assert info.value.field == "b" and info.value.message == "'b' is not a field of this command"


@pytest.mark.parametrize("key", ["", "with space", " ", "clé", "x" * 129, "tab\t", "\x7f", None, 7])
def test_the_idempotency_key_is_1_to_128_printable_ascii_without_space(key):
    with pytest.raises(InvalidArgument) as info:
        key_check(key)
    assert info.value.field == "Idempotency-Key" and info.value.message.startswith("Idempotency-Key ")


def test_the_idempotency_key_limits_themselves_are_accepted():
    assert key_check("!" * 128) == "!" * 128 and key_check("~") == "~"


def test_the_fingerprint_ignores_key_order_and_keeps_number_literals():
    one = exactjson.loads('{"a":1.10,"b":[1,2]}')
    same = exactjson.loads('{"b":[1,2],"a":1.10}')
    other = exactjson.loads('{"a":1.1,"b":[1,2]}')
    assert fingerprint(operation="o", target="t", command=one) == fingerprint(operation="o", target="t", command=same)
    assert fingerprint(operation="o", target="t", command=one) != fingerprint(operation="o", target="t", command=other)
