"""The metric registry: canonical names, units and which direction is "better".

Every part of Ablate reads direction from here (API validation, runners, verdicts, charts), so a
metric's orientation is decided in exactly one place, in this order:

1. a registered metric (:data:`KNOWN_METRICS`) has its own direction, and its unit is fixed;
2. a custom metric may state it: ``better: higher|lower`` on the submitted result;
3. else it is read from the unit by :func:`parse_unit_direction`, which understands compound units:
   a rate (anything per unit of time: ``tokens/s``, ``it/s``, ``GB/s``, ``tokens/s/device``) is
   higher-is-better; a cost in the numerator (time ``ms/step``, ``s/it``, ``usec``; memory
   ``GiB/device``; energy and power ``J``, ``W``, ``kWh``; money) is lower-is-better; an amount of
   work (``tokens``, ``samples``, ``TFLOPS``, ``tokens/J``) is higher-is-better.
4. A custom metric whose direction none of these settles (``%``, ``count``, ``1``) is refused at
   ingest with a message saying how to state it.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]

# The largest magnitude a stored metric or series value may have (the results contract). Far beyond any
# real benchmark figure (1e15 tokens/s), and small enough that sums, squares and products of a
# comparison's values stay finite in float64: a finite value never breaks the analysis of a page.
MAX_ABS_VALUE = 1e15


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
    # Time of the warm-up steps beyond a normal step when torch.compile is on (docs/runners.md).
    MetricDef("compile_time_s", "s", "lower", "Compile time"),
)

KNOWN_METRICS: dict[str, MetricDef] = {d.name: d for d in _DEFS}
# name -> unit of every registered metric (what runners and log parsers report in).
METRIC_UNITS: dict[str, str] = {d.name: d.unit for d in _DEFS}


# Unit atoms, compared case-insensitively ("B" bytes and "b" bits are both memory).
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TIME = _words(
    "s sec secs second seconds ms msec msecs millisecond milliseconds us usec usecs µs μs microsecond "
    "microseconds ns nsec nsecs nanosecond nanoseconds min mins minute minutes h hr hrs hour hours "
    "d day days"
)
_MEMORY = _words("b byte bytes kb mb gb tb pb kib mib gib tib pib bit bits kbit mbit gbit")
_ENERGY = _words("j kj mj joule joules wh kwh mwh w kw mw watt watts cal kcal")
_MONEY = _words("$ usd eur cny dollar dollars cost")
# Amounts of work or rates already per time (TFLOPS = FLOP/s): more is better.
_WORK = _words(
    "token tokens tok toks sample samples seq seqs sequence sequences image images img imgs it its iter "
    "iters iteration iterations step steps batch batches example examples req reqs request requests "
    "query queries op ops flop flops gflop gflops tflop tflops pflop pflops"
)
# Counts of bad events: fewer is better whatever they are counted per (failures/day is not a rate to
# maximise). Matched against the unit's numerator and the words of a custom metric's name.
_FAILURES = _words(
    "fail fails failed failure failures error errors err errs fault faults crash crashes crashed oom ooms "
    "timeout timeouts retry retries restart restarts hang hangs exception exceptions incident incidents"
)
_PER_WORDS = (" per ", "per ")


def _atoms(unit: str) -> list[str]:
    text = unit.strip().lower()
    for word in _PER_WORDS:
        text = text.replace(word, "/")
    return [part.strip() for part in text.split("/")]


def as_direction(value: str | None) -> Direction | None:
    """``value`` as a Direction when it is one ("higher"/"lower"), else None."""
    if value == "higher":
        return "higher"
    if value == "lower":
        return "lower"
    return None


def parse_unit_direction(unit: str | None) -> Direction | None:
    """Direction read from a (compound) unit, or None when the unit does not settle it.

    ``tokens/s``, ``GB/s`` -> higher (a rate); ``ms/step``, ``GiB/device``, ``J``, ``USD/hour`` -> lower
    (a cost);
    ``tokens``, ``TFLOPS``, ``tokens/J`` -> higher (work, or work per cost); ``%``, ``count`` -> None.
    """
    if unit is None or not unit.strip():
        return None
    numerator, *denominators = _atoms(unit)
    if numerator in _FAILURES:
        return "lower"  # a count of failures, also per time (failures/day)
    if numerator in _TIME | _ENERGY | _MONEY:
        return "lower"  # a cost, also per something (ms/step, J/token, USD/hour)
    if any(d in _TIME for d in denominators):
        return "higher"  # work or data per unit of time: a rate (tokens/s, GB/s)
    if numerator in _MEMORY:
        return "lower"
    if numerator in _WORK:
        return "higher"
    return None


def names_failures(name: str) -> bool:
    """Whether a metric name counts failures (``oom_errors``, ``failures_per_day``): lower is better."""
    return any(word in _FAILURES for word in re.split(r"[^a-z]+", name.lower()))


def infer_direction(unit: str | None) -> Direction:
    """Lenient form of :func:`parse_unit_direction` for already-stored data: unknown means "higher"
    (ingest refuses new custom metrics whose direction is unknown, so only old rows reach this)."""
    return parse_unit_direction(unit) or "higher"


def get_metric(name: str) -> MetricDef | None:
    """The registered definition of ``name``, or None for a custom metric."""
    return KNOWN_METRICS.get(name)


def is_known_metric(name: str) -> bool:
    return name in KNOWN_METRICS


def resolve_metric(name: str, unit: str | None = None, better: str | None = None) -> MetricDef:
    """Definition for a submitted metric: the registry entry, or a custom one built from ``unit``.

    Raises ValueError, with the fix in the message, when a custom metric has no unit, when a known
    metric is submitted with a different unit or direction (a silent mismatch would make every ratio
    wrong), when a custom name looks like a misspelt known one with that metric's unit, or when a
    custom metric's direction is neither stated nor readable from its unit.
    """
    stated = as_direction(better)
    if better is not None and stated is None:
        raise ValueError(f"metric {name!r}: better must be 'higher' or 'lower', got {better!r}")
    known = KNOWN_METRICS.get(name)
    if known is not None:
        if unit is not None and unit.strip() and unit.strip() != known.unit:
            raise ValueError(f"metric {name!r} has unit {known.unit!r}, got {unit!r}")
        if stated is not None and stated != known.direction:
            raise ValueError(
                f"metric {name!r} is {known.direction}-is-better; it cannot be submitted as {stated}"
            )
        return known
    if not name or not name.strip():
        raise ValueError("metric name must not be empty")
    if unit is None or not unit.strip():
        raise ValueError(f"custom metric {name!r} must state a unit")
    unit = unit.strip()
    lookalike = _lookalike(name, unit)
    if lookalike is not None:
        raise ValueError(
            f"unknown metric {name!r} with unit {unit!r}: did you mean {lookalike!r}? "
            "(a custom metric needs a name unlike the registered ones)"
        )
    direction = stated or ("lower" if names_failures(name) else parse_unit_direction(unit))
    if direction is None:
        raise ValueError(
            f"custom metric {name!r}: the unit {unit!r} does not say whether higher or lower is better; "
            "state it with better: 'higher' or better: 'lower'"
        )
    return MetricDef(name=name, unit=unit, direction=direction, label=name, non_negative=False)


def _lookalike(name: str, unit: str) -> str | None:
    """A registered metric that ``name`` is probably a misspelling of (same unit, nearly the same name)."""
    same_unit = [d.name for d in _DEFS if d.unit == unit]
    close = difflib.get_close_matches(name, same_unit, n=1, cutoff=0.8)
    return close[0] if close else None


def describe_metric(name: str, unit: str | None = None, better: str | None = None) -> MetricDef:
    """Lenient lookup for analysis and charts: the registry entry, else a custom definition.

    Never raises: a stored custom metric uses its stored direction (``better``), else its unit's,
    else "higher" (ingest is where an undecidable one is refused; analysis of already-stored data
    must not fail on it).
    """
    known = KNOWN_METRICS.get(name)
    if known is not None:
        return known
    u = (unit or "").strip()
    direction = as_direction(better) or ("lower" if names_failures(name) else infer_direction(u or None))
    return MetricDef(name=name, unit=u, direction=direction, label=name, non_negative=False)


def direction_of(
    name: str, default: Direction = "higher", *, unit: str | None = None, better: str | None = None
) -> Direction:
    """Direction of ``name``: registry first, then the stated ``better``, then the unit, else ``default``."""
    known = KNOWN_METRICS.get(name)
    if known is not None:
        return known.direction
    stated = as_direction(better)
    if stated is not None:
        return stated
    return "lower" if names_failures(name) else parse_unit_direction(unit) or default


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
