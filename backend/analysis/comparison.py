"""Two-sample comparison of a contender against a reference, oriented by the metric registry.

Shared by the ablation ladder (variant vs Base, variant vs previous rung) and the release
regression check, so "speed-up", its CI and its p-value mean the same everywhere: Welch's t on the
log values, i.e. the ratio of geometric means with a Welch-Satterthwaite interval, testable from two
values a side. The exact Mann-Whitney test it replaces cannot reach p < 0.05 at 3 vs 3 repeats
(smallest p 0.1), and the percentile bootstrap of the ratio of medians covered 64-89% at n = 2-3
(docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from ablate.backend.analysis.stats import (
    CLAMPED_NOTE,
    WELCH_LOG_INTERVAL,
    WELCH_LOG_TEST,
    beyond_shown,
    clean_values,
    exp_shown,
    sorted_median,
)
from ablate.backend.analysis.welch import WelchInput, WelchLog, capped_note, welch_family
from ablate.backend.domain.metrics import Direction
from ablate.backend.domain.statistics import ALPHA, CONFIDENCE

TEST_NAME = WELCH_LOG_TEST
INTERVAL_METHOD = WELCH_LOG_INTERVAL
# The baseline of a ladder is measured against itself: its speed-up is exactly this, by definition.
BASELINE_SPEEDUP = 1.0


@dataclass(frozen=True)
class Comparison:
    """Contender vs reference. ``ratio`` > 1 means the contender is better, whatever the metric.

    The ratio is of geometric means (Welch's t on log values gives its interval and p-value);
    the medians are kept for display. ``significant`` reads the adjusted ``q_value``.
    """

    contender: str
    reference: str
    n_contender: int
    n_reference: int
    contender_median: float | None
    reference_median: float | None
    ratio: float | None  # oriented ratio of geometric means
    ci_low: float | None  # Welch-Satterthwaite interval of the oriented ratio
    ci_high: float | None
    p_value: float | None  # raw two-sided Welch p; None when not testable
    q_value: float | None  # adjusted across the batch (``adjustment``); equals p for a single comparison
    testable: bool  # both sides have >= 2 positive values
    significant: bool  # q_value < alpha
    alpha: float
    test: str
    interval_method: str
    adjustment: str
    reasons: tuple[str, ...]
    # The oriented log of ``ratio`` and of its interval: exact where the shown ratio is clamped
    # (beyond 1e+-300, see stats.LOG_SHOWN); analyses that go on computing read these.
    log_ratio: float | None = None
    log_ci_low: float | None = None
    log_ci_high: float | None = None


@dataclass(frozen=True)
class Pair:
    """One comparison to make: a contender sample against a reference sample."""

    contender: Sequence[float] | np.ndarray
    reference: Sequence[float] | np.ndarray
    direction: Direction
    contender_name: str = "contender"
    reference_name: str = "reference"


def compare_many(
    pairs: Sequence[Pair],
    *,
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
    adjust: bool = True,
    cleaned: bool = False,
) -> list[Comparison]:
    """:func:`compare_samples` of many pairs; with ``adjust`` their p-values are Benjamini-Hochberg
    adjusted as one family (the comparisons of one release), and ``significant`` reads q.
    ``cleaned``: every sample is already a :func:`clean_values` array (not cleaned again)."""
    sides = [
        (cast(np.ndarray, p.contender), cast(np.ndarray, p.reference))
        if cleaned
        else (clean_values(p.contender), clean_values(p.reference))
        for p in pairs
    ]
    tests, adjusted, method = welch_family([WelchInput(c, r) for c, r in sides], confidence, adjust=adjust)
    return [
        _comparison(p, c, r, t, q, alpha, method)
        for p, (c, r), t, q in zip(pairs, sides, tests, adjusted, strict=True)
    ]


def compare_samples(
    contender: Sequence[float],
    reference: Sequence[float],
    direction: Direction,
    *,
    contender_name: str = "contender",
    reference_name: str = "reference",
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Oriented ratio of geometric means, its Welch interval and p-value (no adjustment: one test)."""
    pair = Pair(contender, reference, direction, contender_name, reference_name)
    return compare_many([pair], alpha=alpha, confidence=confidence, adjust=False)[0]


def _comparison(
    pair: Pair,
    c: np.ndarray,
    r: np.ndarray,
    t: WelchLog | None,
    q: float | None,
    alpha: float,
    method: str,
) -> Comparison:
    contender_name, reference_name, direction = pair.contender_name, pair.reference_name, pair.direction
    reasons: list[str] = []
    mc = sorted_median(c) if c.size else None
    mr = sorted_median(r) if r.size else None
    if c.size == 0:
        reasons.append(f"{contender_name}: no values")
    if r.size == 0:
        reasons.append(f"{reference_name}: no values")
    log_ratio = log_low = log_high = None
    if c.size and r.size:
        sign = 1.0 if direction == "higher" else -1.0
        if c[0] <= 0 or r[0] <= 0:
            # Ratios (and their logs, used for contribution shares) need strictly positive values.
            reasons.append("non-positive values: ratio undefined")
        elif t is None:
            # One value a side: the ratio of the values, but no spread to test or bound it with.
            log_ratio = sign * float(np.log(c).mean() - np.log(r).mean())
            reasons.append(f"not testable (n={c.size} vs {r.size}): no interval, no test")
        else:
            log_ratio = sign * t.log_ratio
            log_low, log_high = sorted((sign * t.log_low, sign * t.log_high))
            reasons += capped_note(t)
        if beyond_shown(log_ratio, log_low, log_high):
            reasons.append(CLAMPED_NOTE)
    return Comparison(
        contender=contender_name,
        reference=reference_name,
        n_contender=int(c.size),
        n_reference=int(r.size),
        contender_median=mc,
        reference_median=mr,
        ratio=None if log_ratio is None else exp_shown(log_ratio),
        ci_low=None if log_low is None else exp_shown(log_low),
        ci_high=None if log_high is None else exp_shown(log_high),
        p_value=None if t is None else t.p_value,
        q_value=q,
        testable=t is not None,
        significant=q is not None and q < alpha,
        alpha=alpha,
        test=TEST_NAME if t is None else t.method,
        interval_method=INTERVAL_METHOD,
        adjustment=method,
        reasons=tuple(reasons),
        log_ratio=log_ratio,
        log_ci_low=log_low,
        log_ci_high=log_high,
    )
