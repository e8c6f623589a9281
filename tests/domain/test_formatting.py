"""The one convention for numbers and missing values (docs/dashboard.md, "How numbers read")."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ablate.backend.domain import formatting as fmt

NOT_A_NUMBER = [None, float("nan"), float("inf"), -float("inf"), True, "1.5"]


def test_numbers_read_with_significant_digits_and_separators() -> None:
    assert fmt.num(412345.6) == "412,346"
    assert fmt.num(5.0832, 4) == "5.083"
    assert fmt.num(0.0123) == "0.0123"
    assert fmt.num(11780.4, fmt.MEDIAN_DIGITS) == "11,780"
    assert fmt.num(1234.56, fmt.MEDIAN_DIGITS) == "1,235"
    assert fmt.num(2.0) == "2" and fmt.num(-0.5) == "-0.5" and fmt.num(0) == "0"
    # Rounding up past the digits gives all integer digits, never "1e+03".
    assert fmt.num(999.7) == "1,000" and fmt.num(9999.7, 4) == "10,000"


def test_ratios_percentages_and_intervals() -> None:
    assert fmt.ratio(1.2345) == "1.23\u00d7" and fmt.ratio(1) == "1.00\u00d7"
    assert fmt.ratio_ci(1.2345, 1.181, 1.29) == "1.23\u00d7 [1.18, 1.29]"
    assert fmt.ratio_ci(1.2345, None, None) == "1.23\u00d7"
    assert fmt.pct(-4.21) == "-4.2%" and fmt.pct(4.25, signed=False) == "4.2%" and fmt.pct(0) == "+0.0%"
    assert fmt.pct_ci(-4.21, -6.0, -2.1) == "-4.2% [-6.0, -2.1]"
    assert fmt.pct_ci(3.0, float("nan"), 4.0) == "+3.0%"
    assert fmt.interval(1.181, 1.29, "ratio") == "[1.18, 1.29]"
    assert fmt.interval(-6.04, 2.1, "pct") == "[-6.0, +2.1]"
    assert fmt.interval(11702.2, 11903.9, digits=fmt.MEDIAN_DIGITS) == "[11,702, 11,904]"
    assert fmt.num_ci(61.123, 60.51, 61.84, unit="GiB") == "61.12 GiB [60.51, 61.84]"
    assert fmt.num_ci(0.41234, None, 0.5, unit="s") == "0.4123 s"
    assert fmt.quantity(11780.4, "tokens/s") == "11,780 tokens/s" and fmt.quantity(2.5, "") == "2.5"


def test_p_and_q_values() -> None:
    assert fmt.pvalue(0.0002) == "<0.001" and fmt.pvalue(0.0286) == "0.029" and fmt.pvalue(0.001) == "0.001"
    assert fmt.qvalue(0.0002) == "<0.001" and fmt.qvalue(0.5) == "0.500"


@pytest.mark.parametrize("bad", NOT_A_NUMBER)
def test_every_missing_value_is_the_one_glyph(bad: object) -> None:
    assert fmt.MISSING == "\u2014"
    for text in (
        fmt.num(bad),  # type: ignore[arg-type]
        fmt.quantity(bad, "GiB"),  # type: ignore[arg-type]
        fmt.ratio(bad),  # type: ignore[arg-type]
        fmt.ratio_ci(bad, 1.0, 2.0),  # type: ignore[arg-type]
        fmt.pct(bad),  # type: ignore[arg-type]
        fmt.pct_ci(bad, 1.0, 2.0),  # type: ignore[arg-type]
        fmt.num_ci(bad, 1.0, 2.0, unit="s"),  # type: ignore[arg-type]
        fmt.interval(bad, 2.0),  # type: ignore[arg-type]
        fmt.interval(1.0, bad),  # type: ignore[arg-type]
        fmt.pvalue(bad),  # type: ignore[arg-type]
        fmt.qvalue(bad),  # type: ignore[arg-type]
    ):
        assert text == fmt.MISSING


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_no_number_is_written_in_exponent_notation_from_one_up(x: float) -> None:
    for digits in (3, fmt.MEDIAN_DIGITS):
        text = fmt.num(x, digits)
        if abs(x) >= 1:
            assert "e" not in text
        # What is written reads back within its stated precision.
        back = float(text.replace(",", ""))
        assert math.isclose(back, x, rel_tol=10 ** (1 - digits), abs_tol=1e-300)
        assert re.fullmatch(r"-?[\d,]+(\.\d+)?(e[-+]\d+)?", text), text


def test_times_read_in_utc() -> None:
    start = datetime(2026, 1, 2, 10, 0, tzinfo=UTC)
    assert fmt.when(start) == "2026-01-02 10:00 UTC"
    assert fmt.when(start.replace(tzinfo=None)) == "2026-01-02 10:00 UTC"  # stored naive = UTC
    assert fmt.when("2026-01-02T11:30:00+01:00") == "2026-01-02 10:30 UTC"
    assert fmt.when(None) == fmt.MISSING
    assert fmt.duration(start, start + timedelta(minutes=20)) == "20 min 00 s"
    assert fmt.duration(start, start + timedelta(hours=1, minutes=5)) == "1 h 05 min"
    assert fmt.duration(start, start + timedelta(seconds=4.25)) == "4.2 s"
    assert fmt.duration(start, None) == fmt.MISSING
    assert fmt.duration(start, start - timedelta(seconds=1)) == fmt.MISSING


def test_the_domain_layer_imports_nothing_of_the_project() -> None:
    with open(fmt.__file__, encoding="utf-8") as f:
        source = f.read()
    assert not re.search(r"^\s*(from|import)\s+ablate", source, flags=re.M)


def test_numbers_past_the_largest_storable_value_are_in_exponent_notation() -> None:
    """Ratios of values at the ends of the accepted range (1e15 / 1e-300, shown clamped at 1e300)."""
    assert fmt.num(1e300) == "1e+300"
    assert fmt.num(1e15) == "1,000,000,000,000,000"
    assert fmt.num(-2.5e20, 4) == "-2.5e+20"
    assert fmt.ratio(1e300) == f"1e+300{fmt.TIMES}"
    assert fmt.ratio(1.5) == f"1.50{fmt.TIMES}"
    assert fmt.pct(1e302) == "+1e+302%"
    assert fmt.pct(1e302, signed=False) == "1e+302%"
    assert fmt.ratio_ci(1e300, 2.5e299, 1e300) == f"1e+300{fmt.TIMES} [2.5e+299, 1e+300]"
    assert fmt.pct_ci(1e20, -100.0, 1e30) == "+1e+20% [-100.0, +1e+30]"
