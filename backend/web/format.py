"""Number and time formatting shared by every page (registered as Jinja2 filters).

Missing values render as an em dash, never as "None" or "nan", so a half-finished study reads cleanly.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

MISSING = "\u2014"


def _ok(x: float | None) -> bool:
    return x is not None and isinstance(x, int | float) and math.isfinite(x)


def num(x: float | None, digits: int = 3) -> str:
    """A number with ``digits`` significant digits and thousands separators for large values."""
    if not _ok(x):
        return MISSING
    assert x is not None
    if abs(x) >= 10**digits:
        return f"{x:,.0f}"
    return f"{x:,.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}g}"


def ratio(x: float | None) -> str:
    return f"{x:.2f}\u00d7" if _ok(x) else MISSING


def ratio_ci(x: float | None, low: float | None = None, high: float | None = None) -> str:
    """E.g. ``1.23x [1.18, 1.29]`` (multiplication sign); no interval when it is unknown."""
    if not _ok(x):
        return MISSING
    if _ok(low) and _ok(high):
        return f"{x:.2f}\u00d7 [{low:.2f}, {high:.2f}]"
    return f"{x:.2f}\u00d7"


def pct(x: float | None, signed: bool = True) -> str:
    if not _ok(x):
        return MISSING
    return f"{x:+.1f}%" if signed else f"{x:.1f}%"


def pct_ci(x: float | None, low: float | None = None, high: float | None = None) -> str:
    """E.g. ``-4.2% [-6.0, -2.1]``."""
    if not _ok(x):
        return MISSING
    if _ok(low) and _ok(high):
        return f"{x:+.1f}% [{low:+.1f}, {high:+.1f}]"
    return f"{x:+.1f}%"


def pvalue(p: float | None) -> str:
    if not _ok(p):
        return MISSING
    assert p is not None
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def when(value: datetime | str | None) -> str:
    """UTC timestamp to the minute; naive datetimes are taken as UTC (how the database stores them)."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(start: datetime | None, end: datetime | None) -> str:
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


FILTERS = {
    "num": num,
    "ratio": ratio,
    "ratio_ci": ratio_ci,
    "pct": pct,
    "pct_ci": pct_ci,
    "pvalue": pvalue,
    "when": when,
    "duration": duration,
}
