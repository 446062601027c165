"""Exact JSON numbers: every literal keeps its exact value, and comparisons and multiples agree with Fraction."""

import copy
import pickle
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from core import exactjson, exactnumber
from core.limits import MAX_NUMBER_CHARS
from tests.literals import FAR, coefficients, fraction_of, spelling


def value_of(text: str):
    return exactjson.to_python(exactjson.Number(text))


# Exponents Fraction can still reach.
exponents = st.integers(-40, 40)


@given(coefficients, exponents, st.data())
def test_every_spelling_of_a_number_is_read_as_exactly_its_value(coefficient, exponent, data):
    text = data.draw(spelling(coefficient, exponent))
    value = value_of(text)
    assert not isinstance(value, float)
    assert Fraction(value) == fraction_of(coefficient, exponent)


@given(coefficients, exponents, coefficients, exponents, st.data())
def test_compare_agrees_with_fractions(c1, e1, c2, e2, data):
    a, b = value_of(data.draw(spelling(c1, e1))), value_of(data.draw(spelling(c2, e2)))
    exact_a, exact_b = fraction_of(c1, e1), fraction_of(c2, e2)
    assert exactnumber.compare(a, b) == (exact_a > exact_b) - (exact_a < exact_b)


@given(coefficients, exponents, st.data())
def test_a_whole_number_is_integral_however_it_is_spelled(coefficient, exponent, data):
    value = value_of(data.draw(spelling(coefficient, exponent)))
    assert exactnumber.is_integral(value) == (fraction_of(coefficient, exponent).denominator == 1)


@given(coefficients, exponents, st.integers(1, 10**30), st.integers(-30, 30), st.data())
def test_is_multiple_agrees_with_fractions(c1, e1, divisor, e2, data):
    value, by = value_of(data.draw(spelling(c1, e1))), value_of(data.draw(spelling(divisor, e2)))
    assert exactnumber.is_multiple(value, by) == ((fraction_of(c1, e1) / fraction_of(divisor, e2)).denominator == 1)


def test_literals_beyond_decimals_range_keep_their_value_and_order():
    far, farther, tiny = value_of(FAR), value_of("2e99999999999999999999"), value_of("-1.5e-99999999999999999999")
    assert isinstance(far, exactnumber.FarDecimal) and str(far) == "1E+99999999999999999999"
    assert far == value_of("10e99999999999999999998") and far != farther and far < farther
    assert far > 10**MAX_NUMBER_CHARS and value_of("-" + FAR) < -(10**MAX_NUMBER_CHARS)
    assert 0 > tiny > value_of("-1e-1999999999999999997") and str(tiny) == "-15E-100000000000000000000"
    assert exactnumber.is_integral(far) and not exactnumber.is_integral(tiny)
    assert sorted([farther, 1, far, tiny]) == [tiny, 1, far, farther]
    assert value_of("1000e-1999999999999999999") == value_of("1e-1999999999999999996")  # trailing zeros moved
    assert value_of("0e" + "9" * 200) == 0 and str(value_of("-0.0e-" + "9" * 200)) == "-0"


def test_an_extreme_multiple_is_decided_without_overflow_or_unbounded_work():
    cent = value_of("0.01")
    for multiple in ("1e250", FAR, "19.99", "-0.07", "1e-2", "0", "12345678901234567890123.45"):
        assert exactnumber.is_multiple(value_of(multiple), cent), multiple
    for other in ("1e-3", "0.30000000000000001", "-1.5e-99999999999999999999", "19.999"):
        assert not exactnumber.is_multiple(value_of(other), cent), other
    assert exactnumber.is_multiple(value_of(FAR), value_of("5e99999999999999999998"))  # 100 / 5
    assert not exactnumber.is_multiple(value_of(FAR), value_of("3e99999999999999999998"))  # 100 / 3


def test_exact_decimals_survive_copy_and_pickle():
    for text in ("0.01", FAR, "-1.5e-99999999999999999999"):
        value = value_of(text)
        for copied in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
            assert copied == value and type(copied) is type(value) and str(copied) == str(value)
