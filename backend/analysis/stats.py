"""Descriptive statistics of repeated runs, and the small statistical building blocks others share.

All results are plain Python floats or None, never NaN, so they serialise to JSON unchanged.
Every random step is seeded, and inputs are sorted first, so the same multiset of values always
gives byte-identical output whatever order the runs were recorded in.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

DEFAULT_N_RESAMPLES = 9999
# Exact tests while the number of distinct splits stays below these (speed: ~50 ms at 5000).
_EXACT_LIMIT = 100_000
_EXACT_PERMUTATION_LIMIT = 5_000


@dataclass(frozen=True)
class Summary:
    """Summary of one sample (e.g. the repeats of one variant for one metric)."""

    n: int
    median: float | None
    mean: float | None
    std: float | None  # ddof=1; None when n < 2
    cv: float | None  # std / |mean|; None when undefined
    min: float | None
    max: float | None
    ci_low: float | None  # bootstrap CI of the median; None when n < 2
    ci_high: float | None
    confidence: float
    noisy: bool
    reasons: tuple[str, ...]


def clean_values(values: Sequence[float]) -> np.ndarray:
    """Values as a sorted float array; sorting makes every seeded resample order-independent."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError("values must be finite numbers")
    return np.sort(arr)


def finite_or_none(x: float | np.floating | None) -> float | None:
    """A Python float, or None for None/NaN/inf (NaN must never leak into a report)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def bootstrap_ci(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI via scipy, with every sample resampled independently.

    Percentile rather than BCa: BCa's jackknife acceleration is unstable or undefined (NaN) for
    medians of 2-5 repeats, which is exactly the sample size of a benchmark ladder, while the
    percentile interval is always defined and stays within the observed range of the statistic.
    """
    if any(s.size < 2 for s in samples):
        return None, None
    if all(np.ptp(s) == 0 for s in samples):
        # Degenerate data: every resample gives the same statistic, so the CI is that point.
        point = finite_or_none(statistic(*samples, axis=-1))
        return point, point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            samples,
            statistic,
            n_resamples=n_resamples,
            vectorized=True,
            paired=False,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    return finite_or_none(res.confidence_interval.low), finite_or_none(res.confidence_interval.high)


def _median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis)


def summarize(
    values: Sequence[float],
    *,
    noisy_cv: float = 0.05,
    min_n: int = 3,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> Summary:
    """Median, mean, spread and a bootstrap CI of the median; flags samples too small or noisy."""
    arr = clean_values(values)
    n = int(arr.size)
    if n == 0:
        return Summary(0, None, None, None, None, None, None, None, None, confidence, True, ("no values",))
    median = float(np.median(arr))
    mean = float(np.mean(arr))
    std = float(np.std(arr, ddof=1)) if n >= 2 else None
    cv = std / abs(mean) if std is not None and mean != 0 else None
    ci_low, ci_high = bootstrap_ci((arr,), _median, confidence=confidence, n_resamples=n_resamples, seed=seed)
    reasons: list[str] = []
    if n < min_n:
        reasons.append(f"n<{min_n}")
    if cv is not None and cv > noisy_cv:
        reasons.append(f"cv>{noisy_cv * 100:g}%")
    return Summary(
        n=n,
        median=median,
        mean=mean,
        std=std,
        cv=finite_or_none(cv),
        min=float(arr[0]),
        max=float(arr[-1]),
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        noisy=bool(reasons),
        reasons=tuple(reasons),
    )


def min_possible_p(n1: int, n2: int) -> float | None:
    """Smallest two-sided p-value an exact Mann-Whitney U test can reach with these sizes.

    The most extreme split of n1+n2 ranks has probability 1/C(n1+n2, n1) on each side, so the
    floor is 2/C(n1+n2, n1): 0.1 for 3 vs 3, which can never be significant at alpha 0.05.
    """
    if n1 < 1 or n2 < 1:
        return None
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float | None:
    """Two-sided Mann-Whitney U p-value, exact for small samples even with ties.

    scipy's "auto" falls back to the normal approximation when values tie, which for 3 vs 3
    reports p < 0.05 although no split of six runs can be that unlikely; an exhaustive
    permutation test gives the exact p instead. Large samples use the normal approximation.
    None when a sample has fewer than two values.
    """
    if x.size < 2 or y.size < 2:
        return None
    splits = math.comb(x.size + y.size, x.size)
    ties = np.unique(np.concatenate([x, y])).size < x.size + y.size
    method: str | stats.PermutationMethod = "asymptotic"
    if not ties and splits <= _EXACT_LIMIT:
        method = "exact"
    elif ties and splits <= _EXACT_PERMUTATION_LIMIT:
        method = stats.PermutationMethod(n_resamples=_EXACT_PERMUTATION_LIMIT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.mannwhitneyu(x, y, alternative="two-sided", method=method)
    p = finite_or_none(res.pvalue)
    return None if p is None else min(1.0, p)
