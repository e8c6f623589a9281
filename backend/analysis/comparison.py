"""Two-sample comparison of a contender against a reference, oriented by the metric registry.

Shared by the ablation ladder (variant vs Base, variant vs previous rung) and the release
regression check, so "speed-up", its CI and its p-value mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backend.analysis.metrics import Direction, orient_ratio
from backend.analysis.stats import (
    DEFAULT_N_RESAMPLES,
    bootstrap_ci,
    clean_values,
    finite_or_none,
    mann_whitney_p,
    min_possible_p,
)

TEST_NAME = "mann-whitney-u two-sided"


@dataclass(frozen=True)
class Comparison:
    """Contender vs reference. ``ratio`` > 1 means the contender is better, whatever the metric."""

    contender: str
    reference: str
    n_contender: int
    n_reference: int
    contender_median: float | None
    reference_median: float | None
    ratio: float | None  # oriented ratio of medians
    ci_low: float | None  # bootstrap CI of the oriented ratio of medians
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney U; None when a side has < 2 values
    min_possible_p: float | None  # floor of the exact test for these sample sizes
    significant: bool  # p_value < alpha
    alpha: float
    test: str
    reasons: tuple[str, ...]


def _oriented_median_ratio(direction: Direction):
    # Vectorised statistic for scipy.stats.bootstrap: samples are (contender, reference).
    def statistic(c: np.ndarray, r: np.ndarray, axis: int = -1) -> np.ndarray:
        mc = np.median(c, axis=axis)
        mr = np.median(r, axis=axis)
        return mc / mr if direction == "higher" else mr / mc

    return statistic


def compare_samples(
    contender: Sequence[float],
    reference: Sequence[float],
    direction: Direction,
    *,
    contender_name: str = "contender",
    reference_name: str = "reference",
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Oriented ratio of medians, its two-sample bootstrap CI, and a Mann-Whitney p-value."""
    c = clean_values(contender)
    r = clean_values(reference)
    reasons: list[str] = []
    mc = float(np.median(c)) if c.size else None
    mr = float(np.median(r)) if r.size else None
    if c.size == 0:
        reasons.append(f"{contender_name}: no values")
    if r.size == 0:
        reasons.append(f"{reference_name}: no values")

    ratio = ci_low = ci_high = None
    if mc is not None and mr is not None:
        if (c.size and c[0] <= 0) or (r.size and r[0] <= 0):
            # Ratios (and their logs, used for contribution shares) need strictly positive values.
            reasons.append("non-positive values: ratio undefined")
        else:
            ratio = orient_ratio(direction, mc, mr)
            ci_low, ci_high = bootstrap_ci(
                (c, r),
                _oriented_median_ratio(direction),
                confidence=confidence,
                n_resamples=n_resamples,
                seed=seed,
            )
            if ci_low is None and (c.size < 2 or r.size < 2):
                reasons.append("fewer than 2 values: no confidence interval")

    p = mann_whitney_p(c, r)
    floor = min_possible_p(int(c.size), int(r.size))
    if c.size and r.size and p is None:
        reasons.append("fewer than 2 values: no significance test")
    elif floor is not None and floor >= alpha:
        reasons.append(f"n too small for significance: min possible p={floor:.3g} >= alpha={alpha:g}")
    significant = p is not None and p < alpha
    return Comparison(
        contender=contender_name,
        reference=reference_name,
        n_contender=int(c.size),
        n_reference=int(r.size),
        contender_median=mc,
        reference_median=mr,
        ratio=finite_or_none(ratio),
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p,
        min_possible_p=floor,
        significant=significant,
        alpha=alpha,
        test=TEST_NAME,
        reasons=tuple(reasons),
    )
