"""Release-over-release checks for one cluster + workload + variant + metric.

Verdict rule (Bencher-style, thresholds stored in the result):

* ``improved`` / ``regressed`` need BOTH ``|improvement_pct| >= threshold_pct`` AND ``p < alpha``
  (two-sided Mann-Whitney U on the repeats).
* Otherwise ``unchanged``. ``unchanged`` is not a proof of no change: when the change passes the
  threshold but the test cannot confirm it, ``indicated`` holds the direction the medians point
  to, and when the sample sizes make ``p < alpha`` impossible (3 vs 3 repeats: min p = 0.1),
  ``conclusive`` is False and a reason says so. Dashboards should show such rows as "suspect",
  not as green.

``change_pct`` is the raw percent change of medians ((new - old) / old * 100). ``improvement_pct``
is the same number oriented by the metric registry: equal for higher-is-better metrics, negated
for lower-is-better ones (a 5% longer step time is improvement_pct = -5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ablate.backend.analysis.stats import (
    DEFAULT_N_RESAMPLES,
    bootstrap_median_cis,
    clean_values,
    finite_or_none,
    mann_whitney_p,
    min_possible_p,
    sorted_median,
)
from ablate.backend.domain.metrics import Direction, describe_metric

Verdict = Literal["improved", "regressed", "unchanged"]
TEST_NAME = "mann-whitney-u two-sided"


@dataclass(frozen=True)
class RegressionResult:
    metric: str
    unit: str
    direction: Direction
    n_baseline: int
    n_contender: int
    baseline_median: float | None
    contender_median: float | None
    change_pct: float | None  # raw: (contender - baseline) / baseline * 100
    change_ci_low: float | None  # bootstrap CI of change_pct
    change_ci_high: float | None
    improvement_pct: float | None  # oriented: > 0 is better
    improvement_ci_low: float | None
    improvement_ci_high: float | None
    p_value: float | None
    min_possible_p: float | None
    significant: bool
    exceeds_threshold: bool
    conclusive: bool  # False when the sample sizes cannot reach p < alpha
    indicated: Verdict | None  # direction by threshold alone, whether or not it is significant
    verdict: Verdict
    threshold_pct: float
    alpha: float
    test: str
    confidence: float
    reasons: tuple[str, ...]


def _pct_change(mc: np.ndarray, mb: np.ndarray) -> np.ndarray:
    # From the medians of (contender, baseline), for the batched bootstrap.
    return (mc - mb) / np.abs(mb) * 100.0


@dataclass(frozen=True)
class ReleasePair:
    """One release-over-release check to make: the repeats of the old and the new release."""

    baseline: Sequence[float]
    contender: Sequence[float]
    metric: str
    unit: str | None = None


def compare_releases_many(
    pairs: Sequence[ReleasePair],
    *,
    threshold_pct: float = 3.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> list[RegressionResult]:
    """:func:`compare_releases` of many pairs; the bootstraps run batched (same results, faster)."""
    cleaned = [(clean_values(p.baseline), clean_values(p.contender)) for p in pairs]
    # The percent change needs a non-zero baseline median; its CI is bootstrapped for those only.
    wanted = [i for i, (b, c) in enumerate(cleaned) if b.size and c.size and sorted_median(b) != 0]
    found = bootstrap_median_cis(
        [(cleaned[i][1], cleaned[i][0]) for i in wanted],
        _pct_change,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )
    cis = dict(zip(wanted, found, strict=True))
    return [
        _compare(p, b, c, cis.get(i, (None, None)), threshold_pct, alpha, confidence)
        for i, (p, (b, c)) in enumerate(zip(pairs, cleaned, strict=True))
    ]


def compare_releases(
    baseline: Sequence[float],
    contender: Sequence[float],
    metric: str,
    *,
    unit: str | None = None,
    threshold_pct: float = 3.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> RegressionResult:
    """Compare the repeats of the new release (``contender``) with the previous one (``baseline``)."""
    return compare_releases_many(
        [ReleasePair(baseline, contender, metric, unit)],
        threshold_pct=threshold_pct,
        alpha=alpha,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )[0]


def _compare(
    pair: ReleasePair,
    b: np.ndarray,
    c: np.ndarray,
    ci: tuple[float | None, float | None],
    threshold_pct: float,
    alpha: float,
    confidence: float,
) -> RegressionResult:
    metric = pair.metric
    mdef = describe_metric(metric, pair.unit)
    sign = 1.0 if mdef.direction == "higher" else -1.0
    reasons: list[str] = []
    mb = sorted_median(b) if b.size else None
    mc = sorted_median(c) if c.size else None
    if b.size == 0:
        reasons.append("baseline: no values")
    if c.size == 0:
        reasons.append("contender: no values")

    change = lo = hi = None
    if mb is not None and mc is not None:
        if mb == 0:
            reasons.append("baseline median is 0: percent change undefined")
        else:
            change = (mc - mb) / abs(mb) * 100.0
            # The baseline median of a resample can be 0 only if values are 0; guard above suffices
            # for positive metrics, and finite_or_none removes any inf from the rest.
            lo, hi = ci
    improvement = None if change is None else sign * change
    if sign > 0:
        imp_lo, imp_hi = lo, hi
    else:
        imp_lo = None if hi is None else -hi
        imp_hi = None if lo is None else -lo

    p = mann_whitney_p(c, b)
    floor = min_possible_p(int(c.size), int(b.size))
    significant = p is not None and p < alpha
    conclusive = floor is not None and floor < alpha and p is not None
    exceeds = improvement is not None and abs(improvement) >= threshold_pct
    indicated: Verdict | None = None
    if improvement is not None:
        indicated = ("improved" if improvement > 0 else "regressed") if exceeds else "unchanged"
    verdict: Verdict = indicated if (exceeds and significant and indicated) else "unchanged"

    if b.size and c.size:
        if p is None:
            reasons.append("fewer than 2 values on a side: no significance test")
        elif floor is not None and floor >= alpha:
            reasons.append(f"n too small for significance: min possible p={floor:.3g} >= alpha={alpha:g}")
        if exceeds and not significant:
            reasons.append(f"{indicated} by {abs(improvement or 0):.2f}% but not significant")
        elif significant and not exceeds:
            reasons.append(f"significant but below the {threshold_pct:g}% threshold")

    return RegressionResult(
        metric=metric,
        unit=mdef.unit,
        direction=mdef.direction,
        n_baseline=int(b.size),
        n_contender=int(c.size),
        baseline_median=mb,
        contender_median=mc,
        change_pct=finite_or_none(change),
        change_ci_low=lo,
        change_ci_high=hi,
        improvement_pct=finite_or_none(improvement),
        improvement_ci_low=imp_lo,
        improvement_ci_high=imp_hi,
        p_value=p,
        min_possible_p=floor,
        significant=significant,
        exceeds_threshold=exceeds,
        conclusive=conclusive,
        indicated=indicated,
        verdict=verdict,
        threshold_pct=threshold_pct,
        alpha=alpha,
        test=TEST_NAME,
        confidence=confidence,
        reasons=tuple(reasons),
    )


@dataclass(frozen=True)
class LookbackResult:
    """z-score of a new release median against the medians of the last ``k`` releases."""

    metric: str | None
    direction: Direction
    new_median: float
    k: int
    n_history: int  # history points actually used (<= k)
    history_mean: float | None
    history_std: float | None  # ddof=1
    z: float | None  # raw (new - mean) / std
    oriented_z: float | None  # > 0 is better
    z_threshold: float
    verdict: Verdict | None  # None when z is undefined
    reasons: tuple[str, ...]


def lookback(
    new_median: float,
    history_medians: Sequence[float],
    k: int = 5,
    *,
    metric: str | None = None,
    unit: str | None = None,
    z_threshold: float = 2.0,
) -> LookbackResult:
    """Compare a new median with the last ``k`` release medians (``history_medians`` oldest first).

    Order matters here by design: the last ``k`` entries are the most recent releases.
    z is None with fewer than 2 history points or a zero standard deviation.
    """
    direction: Direction = describe_metric(metric, unit).direction if metric else "higher"
    used = [float(x) for x in history_medians][-k:] if k > 0 else []
    reasons: list[str] = []
    mean = std = z = oz = None
    verdict: Verdict | None = None
    if used:
        mean = math.fsum(used) / len(used)
    if len(used) < 2:
        reasons.append("fewer than 2 history points")
    else:
        # Sample std in plain floats (statistics.stdev is exact but slow: one call per cell and metric).
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in used) / (len(used) - 1))
        if std == 0:
            reasons.append("history has zero spread")
        else:
            z = (float(new_median) - mean) / std
            oz = z if direction == "higher" else -z
            verdict = ("improved" if oz > 0 else "regressed") if abs(oz) > z_threshold else "unchanged"
    return LookbackResult(
        metric=metric,
        direction=direction,
        new_median=float(new_median),
        k=k,
        n_history=len(used),
        history_mean=finite_or_none(mean),
        history_std=finite_or_none(std),
        z=finite_or_none(z),
        oriented_z=finite_or_none(oz),
        z_threshold=z_threshold,
        verdict=verdict,
        reasons=tuple(reasons),
    )
