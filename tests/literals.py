"""JSON number literals for property tests: a value c·10**e spelled each way JSON allows, and its exact Fraction."""

from fractions import Fraction

from hypothesis import strategies as st

# Beyond decimal's exponent range (about ±10**18): valid JSON, 24 characters.
FAR = "1e99999999999999999999"
# Coefficients past 2**53, where floats stop telling neighbours apart.
coefficients = st.integers(-(2**70), 2**70)


@st.composite
def spelling(draw, coefficient: int, exponent: int) -> str:
    """A JSON literal of exactly coefficient·10**exponent, spelled one of the many ways JSON allows."""
    if coefficient == 0:
        return draw(st.sampled_from(["0", "-0", "0.0", "-0.000", f"0e{exponent}", f"0.00E{exponent}"]))
    digits = str(abs(coefficient)) + "0" * draw(st.integers(0, 3))
    exponent -= len(digits) - len(str(abs(coefficient)))
    point = draw(st.integers(0, len(digits)))  # digits after the point
    whole, fraction = digits[: len(digits) - point] or "0", digits[len(digits) - point :]
    if whole == "0" and fraction:
        fraction = "0" * draw(st.integers(0, 3)) + fraction
        point = len(fraction)
    exponent += point
    letter = draw(st.sampled_from(["e", "E", "e+", "E+"])) if exponent >= 0 else draw(st.sampled_from(["e", "E"]))
    text = ("-" if coefficient < 0 else "") + whole + ("." + fraction if fraction else "")
    if exponent or draw(st.booleans()):
        text += f"{letter}{exponent}"
    return text


def fraction_of(coefficient: int, exponent: int) -> Fraction:
    return Fraction(coefficient) * Fraction(10) ** exponent
