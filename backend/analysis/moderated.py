"""Variance shared across the release's cells: an empirical-Bayes (limma-style) moderated t.

A cell's repeats estimate its noise on ``n - 1`` degrees of freedom: 2 at n = 3, so its t-test has
heavy tails and finds little. The cells of one release and metric measure on the same kind of
hardware with similar noise, so each side's log variance is shrunk toward a prior estimated from all
of them (Smyth 2004, the method of limma's ``squeezeVar``):

    s~^2 = (d0 s0^2 + d s^2) / (d0 + d),  on d0 + d degrees of freedom,

where ``s0^2`` and ``d0`` come from the moments of ``log s^2`` across the sides: the excess of their
spread over what sampling alone gives (``trigamma(d/2)``) is the spread of the true variances, and
``trigamma(d0/2)`` equals it. Cells that share one noise level give a large ``d0`` (nearly a pooled
variance); very unequal levels give a small one (nearly each cell's own). A fixed weight gave 6.9%
false verdicts in simulation (issue 27). The prior is the same for every side of a pool, so cells
that are noisier by kind would be shrunk toward the quieter ones and their intervals too short
(empirical Bayes is calibrated on average over the cells, not per cell: CVs 1.5/2/3% in one pool
covered the 3% cells 86%). So a moderated variance is never below the cell's own, pooled over its
two sides on ``nu`` df and inflated by ``1 + (2 / nu)^2`` (:func:`cell_floor`; 1.25 at 3 runs a
side): a noisier kind of cell keeps an interval as wide as its own evidence asks, while an ordinary
cell keeps the prior's degrees of freedom. The per-side guard it replaces (a side above the prior
at F-test p < 0.2 kept its own variance on its own 2 df) fired on a fifth of the sides of pools
that share one noise level and found a 10% drop among 20 comparisons 70.5% of the time, against
96% with the floor. Proven by benchmarks/stats_simulation.py (table moderated).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import optimize, special

MODERATED_METHOD = "empirical-Bayes moderated variances (limma squeezeVar moments), welch-t on log values"
# Below this many sides with spread the prior's own spread is too unstable to lean on: a default
# ladder's 5 rungs give 10 (with 4 rungs, 8 sides, one cell's new runs flipped another's verdict).
MIN_SIDES = 10
# d0 at or above this is a pooled variance in all but name.
MAX_PRIOR_DF = 1e4
# The adaptive design's guard (analysis/sequential.py): a comparison noisier than the prior at this
# one-sided level keeps its own variance. The release verdict floors instead (cell_floor).
GUARD_P = 0.2


@dataclass(frozen=True)
class Prior:
    """The variance the sides share (``s0_sq``, on log values) and its weight (``df``)."""

    s0_sq: float
    df: float
    n_sides: int


def prior_variance(sides: Sequence[tuple[float, int]]) -> Prior | None:
    """The prior of ``sides`` (each a sample variance of log values and its df, df >= 1 and variance
    > 0); None with fewer than :data:`MIN_SIDES` or when the spread says the sides share nothing
    (d0 = 0)."""
    usable = [(v, d) for v, d in sides if v > 0 and d >= 1 and math.isfinite(v)]
    k = len(usable)
    if k < MIN_SIDES:
        return None
    e = [math.log(v) - _digamma_half(d) + math.log(d / 2.0) for v, d in usable]
    mean_e = math.fsum(e) / k
    spread = math.fsum((x - mean_e) ** 2 for x in e) / (k - 1)
    excess = spread - math.fsum(_trigamma_half(d) for _v, d in usable) / k
    if excess <= 0:
        d0 = MAX_PRIOR_DF
    else:
        # trigamma is decreasing: solve trigamma(d0 / 2) = excess on a bracket.
        def gap(d0: float) -> float:
            return float(special.polygamma(1, d0 / 2.0)) - excess

        if gap(MAX_PRIOR_DF) >= 0:
            d0 = MAX_PRIOR_DF
        elif gap(1e-6) <= 0:
            return None
        else:
            d0 = float(optimize.brentq(gap, 1e-6, MAX_PRIOR_DF, xtol=1e-10))
    s0_sq = math.exp(mean_e + special.digamma(d0 / 2.0) - math.log(d0 / 2.0))
    return Prior(s0_sq, d0, k)


# A side's df is its repeats less one: a handful of whole numbers recur on every side of a release.
@functools.lru_cache(maxsize=256)
def _digamma_half(d: int) -> float:
    return float(special.digamma(d / 2.0))


@functools.lru_cache(maxsize=256)
def _trigamma_half(d: int) -> float:
    return float(special.polygamma(1, d / 2.0))


def cell_floor(sides: Sequence[tuple[float, float]]) -> float:
    """The least moderated variance of a cell's sides (each a sample variance of log values and its
    df): their own variance pooled over ``nu`` = the sum of their df, times ``1 + (2 / nu)^2``. The
    factor was chosen by simulation (docs/statistics.md, "Variance shared across the release's
    cells"): it keeps the noisiest class of cells of a mixed pool covered 93% or more at 3 and 5 runs
    a side while the overall coverage stays under 97%. 0 without df."""
    nu = math.fsum(d for _v, d in sides)
    if nu <= 0:
        return 0.0
    return (1.0 + (2.0 / nu) ** 2) * math.fsum(v * d for v, d in sides) / nu


def squeeze(variance: float, df: float, prior: Prior | None, floor: float = 0.0) -> tuple[float, float]:
    """(moderated variance, its df) of one side: shrunk toward the prior, never below ``floor`` (the
    cell's :func:`cell_floor`), on the prior's df plus its own; the side's own without a prior."""
    if prior is None:
        return variance, df
    shrunk = (prior.df * prior.s0_sq + df * variance) / (prior.df + df)
    return max(shrunk, floor), prior.df + df
