"""Release-over-release checks for one cluster + workload + variant + metric.

Verdict rule (Bencher-style, thresholds stored in the result):

* ``improved`` / ``regressed`` need BOTH ``|improvement_pct| >= threshold_pct`` AND ``q < alpha``,
  q being the Benjamini-Hochberg adjusted p-value of Welch's t on the log values (ratio of
  geometric means) across the comparisons of one batch: one release, or one run-set comparison.
* ``not testable`` when a side has fewer than two (positive) values: no test can reach
  significance, so nothing is claimed, not even "unchanged"; reports list these cells.
* Otherwise ``unchanged``. ``unchanged`` is not a proof of no change: ``indicated`` holds the
  direction the estimate points to by the threshold alone. The row is **suspect** (``suspect``)
  when the change passes the threshold AND its own test rejects (raw p < alpha) but the release's
  adjustment does not confirm it (q >= alpha): at most alpha of unchanged comparisons, whatever the
  release's size (benchmarks/stats_simulation.py, table suspects). Passing the threshold alone flagged
  29-42% of unchanged comparisons at CV 5%. Dashboards show suspects apart, never as green.

``change_pct`` is the percent change of geometric means ((new / old - 1) * 100), with its Welch
interval. ``improvement_pct`` is the same number oriented by the metric registry: equal for
higher-is-better metrics, negated for lower-is-better ones (a 5% longer step time is -5).

The lookback check compares the new release's median with the medians of the last ``k`` releases
through a prediction interval: t = (new - mean) / (s sqrt(1 + 1/K)) against Student's t with K - 1
degrees of freedom, at least ``min_history`` releases, and the same minimum effect as the pairwise
verdict. The former rule (z > 2, no minimum) raised 15-42% false alarms with 2-5 history releases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ablate.backend.analysis.moderated import Prior, prior_variance
from ablate.backend.analysis.stats import (
    BH_METHOD,
    CLAMPED_NOTE,
    LOG_RESOLUTION,
    LOG_SHOWN,
    TWO_VALUES_LOG_TEST,
    TWO_VALUES_NOTE,
    WELCH_LOG_INTERVAL,
    WELCH_LOG_TEST,
    WelchLog,
    beyond_shown,
    bh_adjust,
    clean_values,
    finite_or_none,
    sorted_median,
    t_critical,
    t_two_sided_p,
    welch_log,
)
from ablate.backend.domain.metrics import Direction, describe_metric

Verdict = Literal["improved", "regressed", "unchanged", "not testable"]
TEST_NAME = WELCH_LOG_TEST
INTERVAL_METHOD = WELCH_LOG_INTERVAL
LOOKBACK_METHOD = "prediction interval of the next release median: t with K-1 df, factor sqrt(1+1/K)"
NOT_TESTABLE: Verdict = "not testable"


@dataclass(frozen=True)
class RegressionResult:
    metric: str
    unit: str
    direction: Direction
    n_baseline: int
    n_contender: int
    baseline_median: float | None
    contender_median: float | None
    change_pct: float | None  # raw: (geometric mean contender / baseline - 1) * 100
    change_ci_low: float | None  # Welch interval of change_pct
    change_ci_high: float | None
    improvement_pct: float | None  # oriented: > 0 is better
    improvement_ci_low: float | None
    improvement_ci_high: float | None
    p_value: float | None  # raw two-sided Welch p; None when not testable
    q_value: float | None  # adjusted across the batch (``adjustment``)
    testable: bool  # both sides have >= 2 positive values
    significant: bool  # q_value < alpha
    exceeds_threshold: bool
    indicated: Verdict | None  # direction by threshold alone, whether or not it is significant
    verdict: Verdict
    threshold_pct: float
    alpha: float
    test: str
    interval_method: str
    adjustment: str
    confidence: float
    reasons: tuple[str, ...]
    # Unchanged, past the threshold, p < alpha but q >= alpha: unconfirmed, shown apart (module doc).
    suspect: bool = False
    # Between-session variance added to the difference's (log scale; 0: none, e.g. same session).
    session_var: float = 0.0


@dataclass(frozen=True)
class ReleasePair:
    """One release-over-release check to make: the repeats of the old and the new release."""

    baseline: Sequence[float]
    contender: Sequence[float]
    metric: str
    unit: str | None = None
    better: str | None = None  # a custom metric's stored direction ("higher" / "lower")
    # Variance of the difference the repeats cannot show (2 tau^2 for two sessions, analysis/session.py),
    # the df of its estimate, and what the result's reasons say about it.
    session_var: float = 0.0
    session_df: float | None = None
    session_note: str | None = None
    # Pairs sharing a pool (and metric) share a moderated variance (``moderate``): e.g. the rungs of
    # one cluster and workload, which measure the same model on the same hardware.
    pool: str | None = None


def compare_releases_many(
    pairs: Sequence[ReleasePair],
    *,
    threshold_pct: float = 3.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    adjust: bool = True,
    moderate: bool = False,
) -> list[RegressionResult]:
    """:func:`compare_releases` of many pairs, their p-values adjusted as one family (Benjamini-
    Hochberg) when ``adjust``: pass every comparison of one release in one call. ``moderate``
    shrinks each side's variance toward the one the pairs of its metric share (analysis/moderated.py)."""
    cleaned = [(clean_values(p.baseline), clean_values(p.contender)) for p in pairs]
    priors = _priors(pairs, cleaned) if moderate else {}
    tests = [
        welch_log(
            c,
            b,
            confidence,
            extra_var=p.session_var,
            extra_df=p.session_df,
            prior=priors.get((p.metric, p.pool)),
        )
        for p, (b, c) in zip(pairs, cleaned, strict=True)
    ]
    raw = [None if t is None else t.p_value for t in tests]
    adjusted = bh_adjust(raw) if adjust else raw
    method = BH_METHOD if adjust else "none"
    return [
        _compare(p, b, c, t, q, threshold_pct, alpha, confidence, method)
        for p, (b, c), t, q in zip(pairs, cleaned, tests, adjusted, strict=True)
    ]


def _priors(
    pairs: Sequence[ReleasePair], cleaned: Sequence[tuple[np.ndarray, np.ndarray]]
) -> dict[tuple[str, str | None], Prior]:
    """The moderation prior of each metric and pool, from every side with 2+ positive values."""
    sides: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for p, arrays in zip(pairs, cleaned, strict=True):
        for x in arrays:
            if x.size >= 2 and x[0] > 0:
                key = (p.metric, p.pool)
                sides.setdefault(key, []).append((float(np.log(x).var(ddof=1)), int(x.size) - 1))
    out = {}
    for key, found in sides.items():
        prior = prior_variance(found)
        if prior is not None:
            out[key] = prior
    return out


def compare_releases(
    baseline: Sequence[float],
    contender: Sequence[float],
    metric: str,
    *,
    unit: str | None = None,
    threshold_pct: float = 3.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> RegressionResult:
    """Compare the repeats of the new release (``contender``) with the previous one (``baseline``);
    one comparison, so q equals p."""
    return compare_releases_many(
        [ReleasePair(baseline, contender, metric, unit)],
        threshold_pct=threshold_pct,
        alpha=alpha,
        confidence=confidence,
        adjust=False,
    )[0]


def _pct(log_ratio: float) -> float:
    # Clamped above as a shown ratio is (stats.LOG_SHOWN); below, expm1 tends to -1 without error.
    return math.expm1(min(log_ratio, LOG_SHOWN)) * 100.0


def _compare(
    pair: ReleasePair,
    b: np.ndarray,
    c: np.ndarray,
    t: WelchLog | None,
    q: float | None,
    threshold_pct: float,
    alpha: float,
    confidence: float,
    method: str,
) -> RegressionResult:
    metric = pair.metric
    mdef = describe_metric(metric, pair.unit, pair.better)
    sign = 1.0 if mdef.direction == "higher" else -1.0
    reasons: list[str] = []
    mb = sorted_median(b) if b.size else None
    mc = sorted_median(c) if c.size else None
    if b.size == 0:
        reasons.append("baseline: no values")
    if c.size == 0:
        reasons.append("contender: no values")

    change = lo = hi = None
    positive = bool(b.size and c.size and b[0] > 0 and c[0] > 0)
    if b.size and c.size and not positive:
        reasons.append("non-positive values: percent change of geometric means undefined")
    elif t is not None:
        change, lo, hi = _pct(t.log_ratio), _pct(t.log_low), _pct(t.log_high)
        if t.method == TWO_VALUES_LOG_TEST:
            reasons.append(TWO_VALUES_NOTE)
        if beyond_shown(t.log_ratio, t.log_low, t.log_high):
            reasons.append(CLAMPED_NOTE)
    elif positive:
        log_ratio = float(np.log(c).mean() - np.log(b).mean())  # one value a side: no interval
        change = _pct(log_ratio)
        if beyond_shown(log_ratio):
            reasons.append(CLAMPED_NOTE)
    improvement = None if change is None else sign * change
    if sign > 0:
        imp_lo, imp_hi = lo, hi
    else:
        imp_lo = None if hi is None else -hi
        imp_hi = None if lo is None else -lo

    significant = q is not None and q < alpha
    exceeds = improvement is not None and abs(improvement) >= threshold_pct
    indicated: Verdict | None = None
    if improvement is not None:
        indicated = ("improved" if improvement > 0 else "regressed") if exceeds else "unchanged"
    suspect = False
    if t is None:
        verdict: Verdict = NOT_TESTABLE
        if b.size and c.size and positive:
            reasons.append(f"not testable (n={b.size} vs {c.size}): a test needs 2 values a side")
    elif exceeds and significant and indicated:
        verdict = indicated
    else:
        verdict = "unchanged"
        p = t.p_value
        if exceeds and p < alpha:
            suspect = True
            reasons.append(
                f"suspect: {indicated} by {abs(improvement or 0):.2f}% (p={p:.3g}) but not confirmed "
                f"across the comparison's tests (q={q:.3g})"
            )
        elif exceeds:
            reasons.append(f"{indicated} by {abs(improvement or 0):.2f}% but within the noise (p={p:.3g})")
        elif significant:
            reasons.append(f"significant but below the {threshold_pct:g}% threshold")

    if pair.session_note and t is not None:
        reasons.append(pair.session_note)
    return RegressionResult(
        metric=metric,
        unit=mdef.unit,
        direction=mdef.direction,
        n_baseline=int(b.size),
        n_contender=int(c.size),
        baseline_median=mb,
        contender_median=mc,
        change_pct=finite_or_none(change),
        change_ci_low=finite_or_none(lo),
        change_ci_high=finite_or_none(hi),
        improvement_pct=finite_or_none(improvement),
        improvement_ci_low=finite_or_none(imp_lo),
        improvement_ci_high=finite_or_none(imp_hi),
        p_value=None if t is None else t.p_value,
        q_value=q,
        testable=t is not None,
        significant=significant,
        exceeds_threshold=exceeds,
        indicated=indicated,
        verdict=verdict,
        threshold_pct=threshold_pct,
        alpha=alpha,
        test=TEST_NAME if t is None else t.method,
        interval_method=INTERVAL_METHOD,
        adjustment=method,
        confidence=confidence,
        reasons=tuple(reasons),
        suspect=suspect,
        session_var=pair.session_var if t is not None else 0.0,
    )


@dataclass(frozen=True)
class LookbackResult:
    """A new release median against the medians of the last ``k`` releases (prediction interval)."""

    metric: str | None
    direction: Direction
    new_median: float
    k: int
    n_history: int  # history points actually used (<= k)
    history_mean: float | None
    history_std: float | None  # ddof=1
    change_pct: float | None  # raw: (new / history mean - 1) * 100
    improvement_pct: float | None  # oriented: > 0 is better
    t: float | None  # raw (new - mean) / (std sqrt(1 + 1/K)); None when no verdict can be given
    oriented_t: float | None  # > 0 is better
    critical: float | None  # |t| above this is p < alpha (t with K-1 df)
    p_value: float | None
    q_value: float | None  # adjusted across the batch
    alpha: float
    min_history: int
    threshold_pct: float
    method: str
    adjustment: str
    verdict: Verdict | None  # None when the lookback does not speak (too little history)
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class LookbackRequest:
    """One lookback check: the new median and the history medians (oldest first)."""

    new_median: float
    history_medians: Sequence[float]
    metric: str | None = None
    unit: str | None = None
    better: str | None = None


def lookback_many(
    requests: Sequence[LookbackRequest],
    k: int = 5,
    *,
    alpha: float = 0.05,
    min_history: int = 4,
    threshold_pct: float = 3.0,
    adjust: bool = True,
) -> list[LookbackResult]:
    """:func:`lookback` of many checks, their p-values adjusted as one family when ``adjust``."""
    parts = [_lookback_stats(r, k, min_history) for r in requests]
    raw = [p[-1] for p in parts]
    adjusted = bh_adjust(raw) if adjust else raw
    method = BH_METHOD if adjust else "none"
    return [
        _lookback_result(r, part, q, k, alpha, min_history, threshold_pct, method)
        for r, part, q in zip(requests, parts, adjusted, strict=True)
    ]


def lookback(
    new_median: float,
    history_medians: Sequence[float],
    k: int = 5,
    *,
    metric: str | None = None,
    unit: str | None = None,
    alpha: float = 0.05,
    min_history: int = 4,
    threshold_pct: float = 3.0,
) -> LookbackResult:
    """Compare a new median with the last ``k`` release medians (``history_medians`` oldest first).

    Order matters here by design: the last ``k`` entries are the most recent releases. No verdict
    (None) with fewer than ``min_history`` of them; improved/regressed needs p < alpha AND a change
    of at least ``threshold_pct`` against the history mean.
    """
    return lookback_many(
        [LookbackRequest(new_median, history_medians, metric, unit)],
        k,
        alpha=alpha,
        min_history=min_history,
        threshold_pct=threshold_pct,
        adjust=False,
    )[0]


_Stats = tuple[Direction, list[float], float | None, float | None, float | None, float | None]


def _lookback_stats(r: LookbackRequest, k: int, min_history: int) -> _Stats:
    """(direction, used, mean, std, t, p); t and p None when the lookback does not speak."""
    direction: Direction = describe_metric(r.metric, r.unit, r.better).direction if r.metric else "higher"
    used = [float(x) for x in r.history_medians][-k:] if k > 0 else []
    mean = std = t = p = None
    if used:
        mean = math.fsum(used) / len(used)
    if mean is not None and len(used) >= 2:  # mean is set whenever used is not empty
        # Sample std in plain floats (statistics.stdev is exact but slow: one call per cell and metric).
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in used) / (len(used) - 1))
    if std is not None and mean is not None and len(used) >= max(2, min_history):
        diff = float(r.new_median) - mean
        if std > 0:
            t = diff / (std * math.sqrt(1.0 + 1.0 / len(used)))
            p = t_two_sided_p(t, len(used) - 1)
        else:
            # A history without spread (deterministic metric): any difference is outside it.
            t = math.copysign(math.inf, diff) if diff else 0.0
            p = 0.0 if diff else 1.0
    return direction, used, mean, std, t, p


def _lookback_result(
    r: LookbackRequest,
    part: _Stats,
    q: float | None,
    k: int,
    alpha: float,
    min_history: int,
    threshold_pct: float,
    method: str,
) -> LookbackResult:
    direction, used, mean, std, t, p = part
    reasons: list[str] = []
    sign = 1.0 if direction == "higher" else -1.0
    change = None
    if mean is not None and mean != 0:
        change = (float(r.new_median) - mean) / abs(mean) * 100.0
    improvement = None if change is None else sign * change
    verdict: Verdict | None = None
    ot = None if t is None else sign * t
    if len(used) < max(2, min_history):
        reasons.append(f"{len(used)} history releases: the lookback needs {max(2, min_history)}")
    elif t is not None and improvement is not None:
        exceeds = abs(improvement) >= threshold_pct
        if exceeds and q is not None and q < alpha:
            verdict = "improved" if improvement > 0 else "regressed"
        else:
            verdict = "unchanged"
            p = part[-1]
            if exceeds and p is not None and p < alpha:
                # Its own test rejects: never "within the interval" (t = -5.73 read so before).
                reasons.append(
                    f"{improvement:+.2f}% vs the history mean, outside its prediction interval "
                    f"(t={t:.3g}, p={p:.3g}) but not confirmed across the release's lookbacks (q={q:.3g})"
                )
            elif exceeds:
                reasons.append(
                    f"{improvement:+.2f}% vs the history mean, within its prediction interval (p={p:.3g})"
                )
    return LookbackResult(
        metric=r.metric,
        direction=direction,
        new_median=float(r.new_median),
        k=k,
        n_history=len(used),
        history_mean=finite_or_none(mean),
        history_std=finite_or_none(std),
        change_pct=finite_or_none(change),
        improvement_pct=finite_or_none(improvement),
        t=finite_or_none(t),
        oriented_t=finite_or_none(ot),
        critical=t_critical(1.0 - alpha, len(used) - 1) if len(used) >= 2 else None,
        p_value=p,
        q_value=q,
        alpha=alpha,
        min_history=min_history,
        threshold_pct=threshold_pct,
        method=LOOKBACK_METHOD,
        adjustment=method,
        verdict=verdict,
        reasons=tuple(reasons),
    )


# Drift ------------------------------------------------------------------------------------------

TREND_METHOD = (
    "least-squares slope of the log medians of the last K releases and this one, t with n-2 df; "
    "verdict when q < alpha and the fitted change across the window passes the threshold"
)


@dataclass(frozen=True)
class TrendResult:
    """A drift across releases: the slope of log medians over the lookback window and this release.

    The lookback's prediction interval cannot see a drift (its history's spread grows with the drift
    itself: a noise-free linear drift read t = -1.7 against 2.78); a slope test can.
    """

    metric: str | None
    direction: Direction
    n_releases: int  # points of the fit, this release included
    slope_pct: float | None  # raw change per release, percent (exp(slope) - 1)
    change_pct: float | None  # raw fitted change across the window, percent
    improvement_pct: float | None  # oriented: > 0 is better
    t: float | None
    p_value: float | None
    q_value: float | None
    alpha: float
    threshold_pct: float
    method: str
    verdict: Verdict | None  # None: too few releases (or a non-positive median)
    reasons: tuple[str, ...]


def _trend_stats(r: LookbackRequest, k: int, min_history: int) -> tuple[list[float], float, float, float]:
    """(log points, slope, t, p); slope, t and p NaN when the trend does not speak."""
    used = [float(x) for x in r.history_medians][-k:] if k > 0 else []
    points = [*used, float(r.new_median)]
    nan = math.nan
    if len(used) < max(2, min_history) or min(points) <= 0:
        return points, nan, nan, nan
    y = [math.log(v) for v in points]
    m = len(y)
    xbar = (m - 1) / 2.0
    ybar = math.fsum(y) / m
    sxx = math.fsum((i - xbar) ** 2 for i in range(m))
    slope = math.fsum((i - xbar) * (v - ybar) for i, v in enumerate(y)) / sxx
    sse = math.fsum((v - (ybar + slope * (i - xbar))) ** 2 for i, v in enumerate(y))
    # Residuals at rounding level are none (a noise-free line): the slope is then exact.
    if math.sqrt(sse / (m - 2)) < LOG_RESOLUTION:
        if abs(slope) < LOG_RESOLUTION:
            return points, 0.0, 0.0, 1.0
        return points, slope, math.copysign(math.inf, slope), 0.0
    t = slope / math.sqrt(sse / (m - 2) / sxx)
    return points, slope, t, t_two_sided_p(t, m - 2)


def trend_many(
    requests: Sequence[LookbackRequest],
    k: int = 5,
    *,
    alpha: float = 0.05,
    min_history: int = 4,
    threshold_pct: float = 3.0,
    adjust: bool = True,
) -> list[TrendResult]:
    """The drift test of every lookback request (the same inputs), adjusted as one family."""
    parts = [_trend_stats(r, k, min_history) for r in requests]
    raw = [None if math.isnan(p) else p for *_x, p in parts]
    adjusted = bh_adjust(raw) if adjust else raw
    out = []
    for r, (points, slope, t, p), q in zip(requests, parts, adjusted, strict=True):
        direction: Direction = describe_metric(r.metric, r.unit, r.better).direction if r.metric else "higher"
        sign = 1.0 if direction == "higher" else -1.0
        reasons: list[str] = []
        verdict: Verdict | None = None
        slope_pct = change = improvement = None
        if math.isnan(slope):
            reasons.append(
                f"{len(points)} releases: the trend needs {max(2, min_history) + 1} with positive medians"
            )
        else:
            slope_pct = _pct(slope)
            change = _pct(slope * (len(points) - 1))
            improvement = sign * change
            exceeds = abs(improvement) >= threshold_pct
            if exceeds and q is not None and q < alpha:
                verdict = "improved" if improvement > 0 else "regressed"
                reasons.append(f"drift: {slope_pct:+.2f}% per release over {len(points)} releases")
            else:
                verdict = "unchanged"
        out.append(
            TrendResult(
                metric=r.metric,
                direction=direction,
                n_releases=len(points),
                slope_pct=finite_or_none(slope_pct),
                change_pct=finite_or_none(change),
                improvement_pct=finite_or_none(improvement),
                t=finite_or_none(t),
                p_value=None if math.isnan(p) else p,
                q_value=q,
                alpha=alpha,
                threshold_pct=threshold_pct,
                method=TREND_METHOD,
                verdict=verdict,
                reasons=tuple(reasons),
            )
        )
    return out
