"""A step's result contract judges numbers exactly: the value and the contract's own numbers, in every check."""

import copy
from fractions import Fraction

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from core import exactjson
from core.errors import InvalidArgument
from engine.definitions import contract_validator, contract_violation
from history.models import Disposition, InboxRecord, InstanceState, ReviewCause, Step, WorkflowDefinition
from testkit import states
from testkit.driver import task_step
from tests.literals import FAR, coefficients, fraction_of, spelling

MONEY = exactjson.dumps(states.MONEY)
# Exponents Fraction reaches, and exponents beyond decimal's range (about ±10**18).
exponents = st.one_of(st.integers(-40, 40), st.integers(-(10**20), 10**20))


def _violation(contract: str, value: str) -> str | None:
    """The contract, as the stored spec holds it (exact numbers), applied to a value's JSON text."""
    return contract_violation(step_spec={"contract": exactjson.to_python(exactjson.loads(contract))}, value_text=value)


# ---- multipleOf ----------------------------------------------------------------------------------


@given(st.integers(1, 10**6), exponents, st.integers(-(10**40), 10**40), exponents.map(abs), st.data())
def test_every_multiple_passes_multiple_of_however_it_is_spelled(divisor, exponent, factor, shift, data):
    by = data.draw(spelling(divisor, exponent))
    value = data.draw(spelling(factor * divisor, exponent + shift))
    assert _violation(f'{{"multipleOf":{by}}}', value) is None


@given(st.integers(1, 10**6), exponents, st.integers(-(10**40), 10**40), st.integers(1, 9), st.data())
def test_every_non_multiple_fails_multiple_of(divisor, exponent, factor, remainder, data):
    by = data.draw(spelling(divisor, exponent))
    # (10·k·d + r)·10^(e−1) / (d·10^e) = k + r/(10·d), never a whole number for 0 < r < 10.
    value = data.draw(spelling(10 * factor * divisor + remainder, exponent - 1))
    assert "is not a multiple of" in _violation(f'{{"multipleOf":{by}}}', value)


@pytest.mark.parametrize(
    ("amount", "verdict"),
    [
        ("19.99", None),
        ("0.07", None),
        ("-1234567890123456789.01", None),
        ("1e250", None),
        (FAR, None),
        ("0.30000000000000001", "0.30000000000000001 is not a multiple of 0.01"),
        ("19.999", "19.999 is not a multiple of 0.01"),
        ("-1.5e-99999999999999999999", "-15E-100000000000000000000 is not a multiple of 0.01"),
    ],
)
def test_money_is_a_multiple_of_a_cent_exactly(amount, verdict):
    assert _violation(MONEY, f'{{"amount":{amount}}}') == verdict


# ---- bounds ----------------------------------------------------------------------------------------

BOUNDS = {
    "minimum": lambda value, bound: value >= bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
    "exclusiveMaximum": lambda value, bound: value < bound,
}


@given(st.sampled_from(sorted(BOUNDS)), coefficients, st.integers(-40, 40), st.data())
def test_bounds_agree_with_exact_fractions(keyword, bound, exponent, data):
    if data.draw(st.booleans()):  # a digit or two from the bound, where floats round both to one number
        shift = data.draw(st.integers(0, 25))
        value, value_exponent = bound * 10**shift + data.draw(st.integers(-2, 2)), exponent - shift
    else:
        value, value_exponent = data.draw(coefficients), data.draw(st.integers(-40, 40))
    bound_text, value_text = data.draw(spelling(bound, exponent)), data.draw(spelling(value, value_exponent))
    holds = BOUNDS[keyword](fraction_of(value, value_exponent), fraction_of(bound, exponent))
    assert (_violation(f'{{"{keyword}":{bound_text}}}', value_text) is None) == holds


def test_bounds_beyond_decimals_range_are_exact():
    assert _violation(f'{{"maximum":{FAR}}}', "1e99999999999999999998") is None
    assert _violation('{"maximum":1e300}', FAR) is not None
    assert _violation('{"exclusiveMinimum":0}', "1e-99999999999999999999") is None
    assert _violation('{"exclusiveMaximum":0}', "1e-99999999999999999999") is not None
    assert _violation(f'{{"minimum":{FAR}}}', "10e99999999999999999998") is None


# ---- integer, enum, const, uniqueItems ---------------------------------------------------------------


@given(coefficients, st.integers(-40, 40), st.data())
def test_a_whole_number_is_an_integer_however_it_is_spelled(coefficient, exponent, data):
    value = data.draw(spelling(coefficient, exponent))
    whole = fraction_of(coefficient, exponent).denominator == 1
    assert (_violation('{"type":"integer"}', value) is None) == whole


def test_draft_4_keeps_its_own_integer_rule():
    draft4 = '{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"}'
    assert _violation(draft4, "1") is None and _violation(draft4, "1.0") is not None


def test_a_subschema_naming_its_draft_judges_numbers_exactly_too():
    named = '{"properties":{"amount":{"$schema":"https://json-schema.org/draft/2020-12/schema","multipleOf":0.01}}}'
    assert _violation(named, '{"amount":1e250}') is None
    assert _violation(named, '{"amount":0.30000000000000001}') == "0.30000000000000001 is not a multiple of 0.01"


@pytest.mark.parametrize(
    ("contract", "refusal"),
    [
        ('{"minItems":2.0,"multipleOf":1e-400}', None),  # an integer and a positive number, exactly
        ('{"minItems":2.5}', "2.5 is not of type 'integer'"),
        ('{"multipleOf":0}', "0 is less than or equal to the minimum of 0"),
        ('{"$schema":"http://json-schema.org/draft-04/schema#","minItems":2.0}', "2.0 is not of type 'integer'"),
    ],
)
def test_a_contract_is_checked_against_its_meta_schema_with_exact_numbers(engine, contract, refusal):
    steps = [task_step("a", contract=exactjson.loads(contract))]
    if refusal is None:
        engine.define(steps)
        return
    with pytest.raises(InvalidArgument) as refused:
        engine.define(steps)
    assert refused.value.message == f"steps[0].contract: is not a valid JSON Schema: {refusal}"
    assert not WorkflowDefinition.objects.exists()


@given(coefficients, st.data())
def test_const_and_enum_match_a_number_however_it_is_spelled_and_nothing_else(n, data):
    const, same, neighbour = data.draw(spelling(n, 0)), data.draw(spelling(n, 0)), data.draw(spelling(n + 1, 0))
    assert _violation(f'{{"const":{const}}}', same) is None
    assert _violation(f'{{"enum":["{const}",{const}]}}', same) is None
    assert _violation(f'{{"const":{const}}}', neighbour) is not None
    assert _violation(f'{{"const":{const}}}', f'"{const}"') is not None


def test_one_and_one_point_zero_are_equal_but_true_is_not_one():
    assert _violation('{"const":1}', "1.0") is None and _violation('{"enum":[1.0]}', "1e0") is None
    assert _violation('{"const":1}', "true") is not None and _violation('{"const":true}', "1.0") is not None
    assert _violation('{"uniqueItems":true}', "[1,1.0]") is not None
    assert _violation('{"uniqueItems":true}', "[1,true,9007199254740992,9007199254740993.0]") is None
    assert _violation('{"uniqueItems":true}', f"[{FAR},10e99999999999999999998]") is not None
    assert _violation('{"uniqueItems":true}', f"[{FAR},2e99999999999999999999]") is None


def test_a_contract_with_an_exact_literal_keeps_it():
    assert _violation('{"const":0.30000000000000001}', "0.3") is not None
    assert _violation('{"const":0.30000000000000001}', "0.300000000000000010") is None


# ---- never raises, built once ------------------------------------------------------------------------

EVERY_NUMBER_RULE = (
    '{"type":"integer","multipleOf":0.07,"minimum":-1e300,"exclusiveMaximum":1e99999999999999999999,'
    '"enum":[7,0.07,1e250,-1.5e-99999999999999999999],"not":{"const":3.5}}'
)


# Up to 81 digits and a 101-digit exponent: within the 256 characters a literal may have.
@given(st.integers(-(10**80), 10**80), st.integers(-(10**100), 10**100), st.data())
def test_any_number_within_the_limits_is_judged_without_raising(coefficient, exponent, data):
    value = data.draw(spelling(coefficient, exponent))
    verdict = _violation(EVERY_NUMBER_RULE, f"[{value}]")  # an array: the contract does not apply
    assert verdict is not None and "is not of type" in verdict
    verdict = _violation(EVERY_NUMBER_RULE, value)
    assert verdict is None or isinstance(verdict, str)


def test_each_contract_is_compiled_once():
    schema = exactjson.to_python(states.MONEY)
    validator = contract_validator(schema=schema)
    assert contract_validator(schema=copy.deepcopy(schema)) is validator
    other = exactjson.to_python(exactjson.loads(MONEY.replace("0.01", "0.05")))
    assert contract_validator(schema=other) is not validator


# ---- the definition stores its contract's numbers exactly ------------------------------------------


def test_the_stored_spec_keeps_the_contracts_numbers_exact(engine):
    contract = '{"const":0.30000000000000001,"multipleOf":0.01,"maximum":1e400,"minimum":-' + FAR + "}"
    definition = engine.define([task_step("a", contract=exactjson.loads(contract))])
    stored = WorkflowDefinition.objects.get(pk=definition.id).step_spec("a")["contract"]
    assert stored == exactjson.to_python(exactjson.loads(contract))
    assert Fraction(stored["const"]) == Fraction("0.30000000000000001") and not isinstance(stored["const"], float)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT spec FROM {WorkflowDefinition._meta.db_table} WHERE id = %s", [definition.id])
        (text,) = cursor.fetchone()
    assert '"const":0.30000000000000001' in text and "1E+400" in text and "-1E+99999999999999999999" in text


# ---- the engine's own paths --------------------------------------------------------------------------


def _amount(amount: str):
    return exactjson.loads(f'{{"amount":{amount}}}')


@pytest.mark.parametrize(
    ("amount", "state"),
    [("19.99", "SUCCEEDED"), ("1e400", "SUCCEEDED"), ("0.30000000000000001", "NEEDS_REVIEW")],
)
def test_a_task_result_is_judged_exactly(engine, amount, state):
    # demo.echo answers its input: the worker's result is {"amount": <amount>}.
    steps = [task_step("charge", contract=states.MONEY)]
    (instance,) = states.results_pending(engine, 1, steps, _amount(amount))
    engine.settle()
    instance, step = engine.reload(instance), Step.objects.get(instance=instance, key="charge")
    assert step.state == state
    if state == "SUCCEEDED":
        assert step.output == f'{{"amount":{amount}}}'
        assert instance.state == InstanceState.SUCCEEDED
    else:
        assert InboxRecord.objects.get().disposition == Disposition.CONTRACT_VIOLATION
        assert instance.review_cause == ReviewCause.RESULT_CONTRACT_VIOLATION


@pytest.mark.parametrize(
    ("amount", "disposition"), [("0.07", Disposition.APPLIED), ("0.30000000000000001", Disposition.CONTRACT_VIOLATION)]
)
def test_a_signal_payload_is_judged_exactly(engine, amount, disposition):
    step = {**states.SIGNAL, "contract": states.MONEY}
    (instance,) = states.signals_sent(engine, 1, [step], payload=_amount(amount))
    engine.settle()
    assert InboxRecord.objects.get(signal__isnull=False).disposition == disposition
    expected = "SUCCEEDED" if disposition == Disposition.APPLIED else "NEEDS_REVIEW"
    assert Step.objects.get(instance=instance, key=step["key"]).state == expected
