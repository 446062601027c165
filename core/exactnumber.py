"""Exact JSON numbers, for the checks that judge client values (a step's result contract).

A literal with a fraction or an exponent becomes an ``ExactDecimal`` of exactly its value, never a float:
``19.99`` is 19.99 and ``0.30000000000000001`` is not 0.3. ``decimal.Decimal`` holds every literal whose
exponent lies within about ±10**18; a valid JSON literal beyond that (``1e99999999999999999999``, 24
characters) becomes a ``FarDecimal`` that keeps its coefficient and exponent and compares by them.

``compare``, ``is_integral`` and ``is_multiple`` never use Decimal arithmetic, whose context rounds or
overflows (``1e250 % 0.01`` raises): they divide coefficients of at most ``limits.MAX_NUMBER_CHARS``
digits and compare exponents as integers, so their work never grows with an exponent.
"""

import decimal
import re

# Conversion of a literal beyond Decimal's exponent range raises instead of giving NaN, whatever the
# thread's own context says.
_TRAPPING = decimal.Context(traps=[decimal.InvalidOperation])
_LITERAL = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?")


class ExactDecimal(decimal.Decimal):
    """A JSON number with a fraction or an exponent, exactly. It reads as JSON (``0.01``, not
    ``Decimal('0.01')``), so a contract's messages quote numbers as JSON."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _exact_order(test):
    def method(self, other):
        if not isinstance(other, (int, decimal.Decimal)):
            return NotImplemented
        return test(compare(self, other))

    return method


class FarDecimal(ExactDecimal):
    """A number whose exponent lies beyond ``decimal``'s range. Its Decimal value is the end of that range
    on its side (``float()`` gives ±inf or ±0.0); comparisons, equality, hash and text read ``exact``: its
    coefficient, without trailing zeros, and its exponent. Never convert one with ``int()``."""

    __slots__ = ("exact",)

    def __new__(cls, coefficient: int, exponent: int):
        edge = f"1E+{decimal.MAX_EMAX}" if exponent > 0 else f"1E{decimal.MIN_ETINY}"
        self = super().__new__(cls, ("-" if coefficient < 0 else "") + edge)
        self.exact = (coefficient, exponent)
        return self

    def __str__(self) -> str:
        coefficient, exponent = self.exact
        return f"{coefficient}E{exponent:+d}"

    def __hash__(self) -> int:
        return hash(self.exact)

    def __reduce__(self):
        return FarDecimal, self.exact

    __eq__ = _exact_order(lambda order: order == 0)
    __ne__ = _exact_order(lambda order: order != 0)
    __lt__ = _exact_order(lambda order: order < 0)
    __le__ = _exact_order(lambda order: order <= 0)
    __gt__ = _exact_order(lambda order: order > 0)
    __ge__ = _exact_order(lambda order: order >= 0)


def decimal_of(text: str) -> ExactDecimal:
    """The exact value of a JSON number literal (``ValueError`` when ``text`` is not one)."""
    match = _LITERAL.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a JSON number")
    try:
        return ExactDecimal(text, context=_TRAPPING)
    except decimal.InvalidOperation:
        pass
    sign, whole, fraction, exponent = match.groups(default="")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return ExactDecimal(sign + "0")
    significant = digits.rstrip("0")
    exponent = int(exponent or "0") - len(fraction) + len(digits) - len(significant)
    try:
        # Trailing zeros moved into the exponent may bring it back within range.
        return ExactDecimal(f"{sign}{significant}E{exponent}", context=_TRAPPING)
    except decimal.InvalidOperation:
        return FarDecimal(int(sign + significant), exponent)


def parts(number: int | decimal.Decimal) -> tuple[int, int]:
    """``(coefficient, exponent)`` with ``number == coefficient * 10**exponent``, exactly."""
    if isinstance(number, FarDecimal):
        return number.exact
    if isinstance(number, decimal.Decimal):
        if not number.is_finite():
            raise ValueError(f"{number} is not a JSON number")
        sign, digits, exponent = number.as_tuple()
        coefficient = int("".join(map(str, digits)))
        return (-coefficient if sign else coefficient), exponent
    return number, 0


def compare(a: int | decimal.Decimal, b: int | decimal.Decimal) -> int:
    """-1, 0 or 1 as ``a`` is below, equal to or above ``b``, exactly."""
    (c1, e1), (c2, e2) = parts(a), parts(b)
    if c1 == 0 or c2 == 0 or (c1 < 0) != (c2 < 0):
        return (c1 > c2) - (c1 < c2)
    sign = -1 if c1 < 0 else 1
    m1, m2 = abs(c1), abs(c2)
    # Where the leading digit stands decides; at the same place the exponents differ by less than the
    # number of digits, so aligning the coefficients is bounded work.
    lead1, lead2 = e1 + len(str(m1)), e2 + len(str(m2))
    if lead1 != lead2:
        return sign * ((lead1 > lead2) - (lead1 < lead2))
    if e1 > e2:
        m1 *= 10 ** (e1 - e2)
    else:
        m2 *= 10 ** (e2 - e1)
    return sign * ((m1 > m2) - (m1 < m2))


def _valuation(n: int, p: int) -> int:
    """How many times the prime (or 10) ``p`` divides ``n`` (not 0)."""
    count = 0
    while n % p == 0:
        n //= p
        count += 1
    return count


def is_integral(number: int | decimal.Decimal) -> bool:
    """Whether ``number`` is a whole number (``1.0`` and ``1e3`` are)."""
    coefficient, exponent = parts(number)
    return coefficient == 0 or exponent >= 0 or _valuation(coefficient, 10) >= -exponent


def is_multiple(value: int | decimal.Decimal, divisor: int | decimal.Decimal) -> bool:
    """Whether ``value / divisor`` is an integer, exactly (``divisor`` is not 0).

    With value = c·10^e and divisor = d·10^f, the quotient is (c/d)·10^k, k = e − f. Write d = 2^a·5^b·r
    with r prime to 10: the quotient is an integer iff r divides c and q = c/r holds at least a factors 2
    and b factors 5 once 10^k is counted (v2(q) + k ≥ a, v5(q) + k ≥ b). k is compared, never raised to.
    """
    c, e = parts(value)
    d, f = parts(divisor)
    if d == 0:
        raise ValueError("a multiple of 0 is not defined")
    if c == 0:
        return True
    d = abs(d)
    a, b = _valuation(d, 2), _valuation(d, 5)
    r = d // (2**a * 5**b)
    if c % r:
        return False
    q, k = c // r, e - f
    return _valuation(q, 2) + k >= a and _valuation(q, 5) + k >= b
