"""A new release against the window of the last ``k`` releases: the lookback and the trend checks
of :mod:`ablate.backend.analysis.regression`.

The lookback check compares the new release's median with the medians of the last ``k`` releases
through a prediction interval: t = (new - mean) / (s sqrt(1 + 1/K)) against Student's t with K - 1
degrees of freedom, at least ``min_history`` releases, and the same minimum effect as the pairwise
verdict. The former rule (z > 2, no minimum) raised 15-42% false alarms with 2-5 history releases.

The trend check fits the slope of the log medians over that window and this release: the lookback's
prediction interval cannot see a steady drift, a slope test can.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ablate.backend.analysis.release_pair import Verdict, pct_of_log_ratio
from ablate.backend.analysis.stats import (
    LOG_RESOLUTION,
    family_q_values,
    finite_or_none,
    t_critical,
    t_two_sided_p_many,
)
from ablate.backend.domain.metrics import Direction, describe_metric
from ablate.backend.domain.statistics import ALPHA, THRESHOLD_PCT

LOOKBACK_METHOD = "prediction interval of the next release median: t with K-1 df, factor sqrt(1+1/K)"


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

    @property
    def direction(self) -> Direction:
        """Which way is better: the metric's (a custom one's stored ``better``); without a metric, higher."""
        return describe_metric(self.metric, self.unit, self.better).direction if self.metric else "higher"


@dataclass(frozen=True)
class LookbackRule:
    """When a lookback or trend check speaks and what it claims (module doc): at least
    ``min_history`` earlier releases, a change of at least ``threshold_pct`` and q < ``alpha``."""

    alpha: float = ALPHA
    min_history: int = 4
    threshold_pct: float = THRESHOLD_PCT


def lookback_many(
    requests: Sequence[LookbackRequest],
    k: int = 5,
    *,
    rule: LookbackRule = LookbackRule(),
    adjust: bool = True,
) -> list[LookbackResult]:
    """:func:`lookback` of many checks, their p-values adjusted as one family when ``adjust``."""
    parts = _with_p_values([_lookback_stats(r, k, rule.min_history) for r in requests])
    raw = [p[-1] for p in parts]
    adjusted, method = family_q_values(raw, adjust)
    return [
        _lookback_result(r, part, q, k, rule, method)
        for r, part, q in zip(requests, parts, adjusted, strict=True)
    ]


def lookback(
    new_median: float,
    history_medians: Sequence[float],
    k: int = 5,
    *,
    metric: str | None = None,
    unit: str | None = None,
    rule: LookbackRule = LookbackRule(),
) -> LookbackResult:
    """Compare a new median with the last ``k`` release medians (``history_medians`` oldest first).

    Order matters here by design: the last ``k`` entries are the most recent releases. No verdict
    (None) with fewer than ``rule.min_history`` of them; improved/regressed needs p < alpha AND a
    change of at least ``rule.threshold_pct`` against the history mean.
    """
    return lookback_many(
        [LookbackRequest(new_median, history_medians, metric, unit)],
        k,
        rule=rule,
        adjust=False,
    )[0]


_Stats = tuple[Direction, list[float], float | None, float | None, float | None, float | None]


def _with_p_values(parts: list[_Stats]) -> list[_Stats]:
    """The p-values of the checks with a finite t (left None by :func:`_lookback_stats`), as one batch."""
    ps = _batch_p_values([p[4] for p in parts], [p[5] for p in parts], [len(p[1]) - 1 for p in parts])
    return [(*part[:5], p) for part, p in zip(parts, ps, strict=True)]


def _batch_p_values(
    ts: Sequence[float | None], ps: Sequence[float | None], dfs: Sequence[int]
) -> list[float | None]:
    """``ps`` with each None beside a t filled in: the two-sided t-test's p at ``dfs``, all in one batch
    (the lookback's and the trend's statistics leave those p-values None)."""
    need = [i for i, (t, p) in enumerate(zip(ts, ps, strict=True)) if t is not None and p is None]
    found = t_two_sided_p_many([ts[i] or 0.0 for i in need], [dfs[i] for i in need])
    filled = dict(zip(need, found, strict=True))
    return [filled.get(i, p) for i, p in enumerate(ps)]


def _lookback_stats(r: LookbackRequest, k: int, min_history: int) -> _Stats:
    """(direction, used, mean, std, t, p); t and p None when the lookback does not speak, p None also
    when t is finite (:func:`_with_p_values` fills those in as one batch)."""
    direction = r.direction
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
    rule: LookbackRule,
    adjustment: str,
) -> LookbackResult:
    direction, used, mean, std, t, p = part
    alpha, min_history, threshold_pct = rule.alpha, rule.min_history, rule.threshold_pct
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
        adjustment=adjustment,
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


def _trend_stats(
    r: LookbackRequest, k: int, min_history: int
) -> tuple[list[float], float, float, float | None]:
    """(log points, slope, t, p); slope, t and p NaN when the trend does not speak; p None when t is
    finite (:func:`trend_many` computes those as one batch)."""
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
    return points, slope, t, None


def trend_many(
    requests: Sequence[LookbackRequest],
    k: int = 5,
    *,
    rule: LookbackRule = LookbackRule(),
    adjust: bool = True,
) -> list[TrendResult]:
    """The drift test of every lookback request (the same inputs), adjusted as one family."""
    alpha, min_history, threshold_pct = rule.alpha, rule.min_history, rule.threshold_pct
    stats = [_trend_stats(r, k, min_history) for r in requests]
    ps = _batch_p_values([s[2] for s in stats], [s[3] for s in stats], [len(s[0]) - 2 for s in stats])
    raw = [None if p is None or math.isnan(p) else p for p in ps]
    adjusted, _ = family_q_values(raw, adjust)
    out = []
    for r, (points, slope, t, _), p, q in zip(requests, stats, raw, adjusted, strict=True):
        direction = r.direction
        sign = 1.0 if direction == "higher" else -1.0
        reasons: list[str] = []
        verdict: Verdict | None = None
        slope_pct = change = improvement = None
        if math.isnan(slope):
            reasons.append(
                f"{len(points)} releases: the trend needs {max(2, min_history) + 1} with positive medians"
            )
        else:
            slope_pct = pct_of_log_ratio(slope)
            change = pct_of_log_ratio(slope * (len(points) - 1))
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
                p_value=p,
                q_value=q,
                alpha=alpha,
                threshold_pct=threshold_pct,
                method=TREND_METHOD,
                verdict=verdict,
                reasons=tuple(reasons),
            )
        )
    return out
