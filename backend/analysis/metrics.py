"""The metric registry: canonical names, units and which direction is "better".

Every part of Ablate reads direction from here (API validation, runners, verdicts, charts), so a
metric's orientation is decided in exactly one place.

Custom metrics (names not in :data:`KNOWN_METRICS`) must be submitted with a unit. Their direction
is inferred from the unit: units that look like time or memory (``s``, ``ms``, ``us``, ``ns``,
``min``, ``h``, ``GiB``, ``MiB``, ``KiB``, ``GB``, ``MB``, ``KB``, ``bytes``, ``B``) are
"lower is better"; everything else (rates, ratios, counts) is "higher is better".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class MetricDef:
    """One metric: its canonical name, unit, and which way is better."""

    name: str
    unit: str
    direction: Direction
    label: str
    non_negative: bool = True
    # Inclusive upper bound where one exists physically (mfu is a fraction of peak).
    max_value: float | None = None

    def axis_title(self) -> str:
        """Axis title with unit, e.g. "Throughput (tokens/s)"."""
        return f"{self.label} ({self.unit})" if self.unit and self.unit != "1" else self.label


_DEFS: tuple[MetricDef, ...] = (
    MetricDef("throughput_tokens_per_s", "tokens/s", "higher", "Throughput"),
    MetricDef("throughput_tokens_per_s_per_device", "tokens/s/device", "higher", "Throughput per device"),
    MetricDef("throughput_samples_per_s", "samples/s", "higher", "Sample throughput"),
    MetricDef("step_time_s", "s", "lower", "Step time"),
    MetricDef("tflops_per_device", "TFLOPS", "higher", "TFLOPS per device"),
    MetricDef("mfu", "ratio", "higher", "MFU", max_value=1.0),
    MetricDef("peak_memory_gib", "GiB", "lower", "Peak memory"),
    MetricDef("peak_memory_reserved_gib", "GiB", "lower", "Peak reserved memory"),
    # Cross-entropy loss cannot be negative.
    MetricDef("loss", "1", "lower", "Loss"),
    MetricDef("elapsed_s", "s", "lower", "Elapsed time"),
)

KNOWN_METRICS: dict[str, MetricDef] = {d.name: d for d in _DEFS}

# Units (case-sensitive where case carries meaning, e.g. "B" bytes vs "b" bits) meaning "lower is better".
_LOWER_UNITS: frozenset[str] = frozenset(
    {
        "s",
        "sec",
        "secs",
        "second",
        "seconds",
        "ms",
        "us",
        "µs",
        "ns",
        "min",
        "h",
        "hour",
        "hours",
        "gib",
        "mib",
        "kib",
        "tib",
        "gb",
        "mb",
        "kb",
        "tb",
        "b",
        "byte",
        "bytes",
    }
)


def get_metric(name: str) -> MetricDef | None:
    """The registered definition of ``name``, or None for a custom metric."""
    return KNOWN_METRICS.get(name)


def is_known_metric(name: str) -> bool:
    return name in KNOWN_METRICS


def infer_direction(unit: str | None) -> Direction:
    """Direction of a custom metric from its unit: time/memory units are "lower", others "higher"."""
    if unit is None:
        return "higher"
    return "lower" if unit.strip().lower() in _LOWER_UNITS else "higher"


def resolve_metric(name: str, unit: str | None = None) -> MetricDef:
    """Definition for a submitted metric: the registry entry, or a custom one built from ``unit``.

    Raises ValueError when a custom metric has no unit, or when a known metric is submitted with a
    different unit (a silent unit mismatch would make every ratio wrong).
    """
    known = KNOWN_METRICS.get(name)
    if known is not None:
        if unit is not None and unit.strip() and unit.strip() != known.unit:
            raise ValueError(f"metric {name!r} has unit {known.unit!r}, got {unit!r}")
        return known
    if not name or not name.strip():
        raise ValueError("metric name must not be empty")
    if unit is None or not unit.strip():
        raise ValueError(f"custom metric {name!r} must state a unit")
    unit = unit.strip()
    return MetricDef(name=name, unit=unit, direction=infer_direction(unit), label=name, non_negative=False)


def describe_metric(name: str, unit: str | None = None) -> MetricDef:
    """Lenient lookup for analysis and charts: the registry entry, else a custom definition.

    Never raises: a custom metric without a unit gets unit "" and direction "higher" (the API is
    where a missing unit is rejected; analysis of already-stored data must not fail on it).
    """
    known = KNOWN_METRICS.get(name)
    if known is not None:
        return known
    u = (unit or "").strip()
    return MetricDef(name=name, unit=u, direction=infer_direction(u or None), label=name, non_negative=False)


def direction_of(name: str, default: Direction = "higher", *, unit: str | None = None) -> Direction:
    """Direction of ``name``: registry first, then inferred from ``unit``, else ``default``."""
    known = KNOWN_METRICS.get(name)
    if known is not None:
        return known.direction
    if unit is not None and unit.strip():
        return infer_direction(unit)
    return default


def is_better(name: str, a: float, b: float, *, unit: str | None = None) -> bool:
    """True when value ``a`` is strictly better than ``b`` for this metric."""
    if direction_of(name, unit=unit) == "higher":
        return a > b
    return a < b


def orient_ratio(direction: Direction, contender: float, baseline: float) -> float | None:
    """Ratio where >1 means the contender is better; None when undefined (non-positive, non-finite)."""
    if not (math.isfinite(contender) and math.isfinite(baseline)) or contender <= 0 or baseline <= 0:
        return None
    return contender / baseline if direction == "higher" else baseline / contender


def oriented_ratio(name: str, contender: float, baseline: float, *, unit: str | None = None) -> float | None:
    """Speed-up style ratio of contender over baseline; >1 always means better.

    Throughput: contender / baseline. Step time, memory: baseline / contender.
    """
    return orient_ratio(direction_of(name, unit=unit), contender, baseline)
