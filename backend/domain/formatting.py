"""How numbers, intervals and missing values read: one convention for the dashboard, reports and charts.

The dashboard's convention, used everywhere (docs/dashboard.md, "How numbers read"):

- a missing value (``None``, NaN, infinity) is an em dash, never "None", "nan", "n/a" or an en dash;
- a plain number has 3 significant digits, medians and their intervals 4 (:data:`MEDIAN_DIGITS`),
  with thousands separators and never exponent notation from 1 up: ``412,346``, ``5.083``, ``0.0123``;
  past the largest value a metric may hold (1e15, :data:`EXPONENT_ABOVE`) any number, ratio or
  percentage is in exponent notation instead: ``1e+300×`` (a ratio of 1e-300 and 1e15 values);
- a ratio has 2 decimals and a multiplication sign: ``1.23×``;
- a percentage has 1 decimal, signed when it is a change: ``-4.2%``, a share unsigned: ``45.0%``;
- an interval follows its value in brackets, its bounds written like the value without the sign
  or unit: ``1.23× [1.18, 1.29]``, ``-4.2% [-6.0, -2.1]``, ``61.12 GiB [60.5, 61.8]``;
- p- and q-values have 3 decimals, below 0.001 ``<0.001``.

Machine-readable output (the CSV and JSON reports, the API) keeps raw numbers and never goes through
here. Pure: imports nothing of the project.
"""

# The multiplication sign and the em dash are the intended typography.
# ruff: noqa: RUF002

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Literal, TypeGuard

MISSING = "\u2014"  # em dash
TIMES = "\u00d7"  # multiplication sign
MEDIAN_DIGITS = 4
"""Significant digits of a median and of its interval (the ladder and delta tables)."""

D3_NUM = ",.4~r"
"""The nearest d3-format (plotly.js) spelling of ``num(x, MEDIAN_DIGITS)``, for hover templates of
traces too long to carry a Python-written text per point (a run's step series)."""

IntervalStyle = Literal["num", "ratio", "pct"]


def is_number(x: object) -> TypeGuard[float]:
    """A finite int or float (not a bool): anything else is shown as :data:`MISSING`."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# The largest magnitude a stored value may have (domain.metrics.MAX_ABS_VALUE): beyond it only
# ratios, intervals and changes of extreme values, whose hundreds of digits would mean nothing.
EXPONENT_ABOVE = 1e15


def _huge(x: float, digits: int) -> str | None:
    return f"{x:.{digits}g}" if abs(x) > EXPONENT_ABOVE else None


def _num(x: float, digits: int) -> str:
    if abs(x) > EXPONENT_ABOVE:
        return f"{x:.{digits}g}"
    if abs(x) >= 1:
        text = f"{x:,.{digits}g}"
        # 9999.7 at 4 digits rounds up to 1e+04: past ``digits`` integer digits, write them all.
        return f"{x:,.0f}" if "e" in text else text
    return f"{x:.{digits}g}"


def num(x: float | None, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (all integer digits once there are more)."""
    return _num(x, digits) if is_number(x) else MISSING


def quantity(x: float | None, unit: str, digits: int = 3) -> str:
    """A value with its unit, ``11,780 tokens/s``; a missing value is the glyph alone."""
    if not is_number(x):
        return MISSING
    return f"{_num(x, digits)} {unit}" if unit else _num(x, digits)


def ratio(x: float | None) -> str:
    """``1.23×``."""
    return f"{_huge(x, 3) or f'{x:.2f}'}{TIMES}" if is_number(x) else MISSING


def pct(x: float | None, signed: bool = True) -> str:
    """A percentage already multiplied by 100: ``+4.2%`` (a change) or, unsigned, ``45.0%`` (a share)."""
    if not is_number(x):
        return MISSING
    huge = _huge(x, 3)
    if huge is not None:
        return f"{'+' if signed and x > 0 else ''}{huge}%"
    return f"{x:+.1f}%" if signed else f"{x:.1f}%"


def _bound(x: float, style: IntervalStyle, digits: int) -> str:
    huge = _huge(x, 3) if style != "num" else None
    if huge is not None:
        return f"+{huge}" if style == "pct" and x > 0 else huge
    if style == "ratio":
        return f"{x:.2f}"
    if style == "pct":
        return f"{x:+.1f}"
    return _num(x, digits)


def interval(low: float | None, high: float | None, style: IntervalStyle = "num", digits: int = 3) -> str:
    """``[low, high]``, each bound written like the value it brackets (``style``); missing if either is."""
    if not (is_number(low) and is_number(high)):
        return MISSING
    return f"[{_bound(low, style, digits)}, {_bound(high, style, digits)}]"


def _with_interval(
    value: str, low: float | None, high: float | None, style: IntervalStyle, digits: int
) -> str:
    if is_number(low) and is_number(high):
        return f"{value} {interval(low, high, style, digits)}"
    return value


def ratio_ci(x: float | None, low: float | None = None, high: float | None = None) -> str:
    """``1.23× [1.18, 1.29]``; no interval when it is unknown."""
    return _with_interval(ratio(x), low, high, "ratio", 3) if is_number(x) else MISSING


def pct_ci(x: float | None, low: float | None = None, high: float | None = None) -> str:
    """``-4.2% [-6.0, -2.1]``; no interval when it is unknown."""
    return _with_interval(pct(x), low, high, "pct", 3) if is_number(x) else MISSING


def num_ci(
    x: float | None,
    low: float | None = None,
    high: float | None = None,
    *,
    unit: str = "",
    digits: int = MEDIAN_DIGITS,
) -> str:
    """``61.12 GiB [60.5, 61.8]``: a median with its unit and interval; no interval when it is unknown."""
    return _with_interval(quantity(x, unit, digits), low, high, "num", digits) if is_number(x) else MISSING


def pvalue(p: float | None) -> str:
    """``0.029``, ``<0.001``."""
    if not is_number(p):
        return MISSING
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def qvalue(q: float | None) -> str:
    """A q-value (a p-value adjusted for multiple comparisons) reads like a p-value."""
    return pvalue(q)


def when(value: datetime | str | None) -> str:
    """UTC timestamp to the minute; naive datetimes are taken as UTC (how the database stores them)."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value  # not a timestamp: shown as given
    else:
        moment = value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(start: datetime | None, end: datetime | None) -> str:
    """``4.2 s`` under two minutes, then ``20 min 00 s``, then ``1 h 05 min``."""
    if start is None or end is None:
        return MISSING
    seconds = (end - start).total_seconds()
    if seconds < 0:
        return MISSING
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"
