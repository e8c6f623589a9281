"""Descriptive statistics of repeated runs, and the small statistical building blocks others share.

All results are plain Python floats or None, never NaN, so they serialise to JSON unchanged.
Every random step is seeded, and inputs are sorted first, so the same multiset of values always
gives byte-identical output whatever order the runs were recorded in.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

# 2000 resamples: every interval here is a percentile interval of a function of medians of small
# samples (2-10 repeats). The bootstrap distribution of such a median is discrete (one of the n order
# statistics, or a midpoint of two for even n), so the 2.5% and 97.5% points land on values of that
# discrete distribution; with B = 2000 the Monte-Carlo error of a tail probability is
# sqrt(0.025 * 0.975 / 2000) = 0.35 percentage points, far from moving an endpoint to the next order
# statistic unless one sits right at the boundary (Efron & Tibshirani 1993, ch. 19, recommend
# 1000-2000 for percentile intervals). Measured on the benchmark release (5 repeats, 40 ladders,
# 200 release deltas): every endpoint equals the 9999-resample one to 1e-15, at a fifth of the cost.
# The seed stays fixed: the same data gives the same interval.
DEFAULT_N_RESAMPLES = 2000
# Exact tests while the number of distinct splits stays below these.
_EXACT_LIMIT = 100_000
_EXACT_PERMUTATION_LIMIT = 5_000
# Cells bootstrapped in one scipy call; the statistic holds (cells x resamples) floats at a time.
_CELLS_PER_CALL = 256


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
    if isinstance(values, np.ndarray | list | tuple):
        arr = np.asarray(values, dtype=float)  # no detour through Python floats
    else:
        arr = np.asarray(list(values), dtype=float)
    if arr.size and not np.isfinite(arr).all():
        raise ValueError("values must be finite numbers")
    return np.sort(arr)


def sorted_median(arr: np.ndarray) -> float:
    """Median of a sorted, non-empty array (see :func:`clean_values`), as a Python float.

    The same number ``np.median`` gives (the middle value, or the mean of the two middle ones),
    without its overhead: it is taken for every cell and comparison of a release.
    """
    n = arr.size
    mid = n // 2
    return float(arr[mid]) if n % 2 else float(0.5 * (arr[mid - 1] + arr[mid]))


def finite_or_none(x: float | np.floating | None) -> float | None:
    """A Python float, or None for None/NaN/inf (NaN must never leak into a report)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


MedianStatistic = Callable[..., np.ndarray]
"""Combines the medians of the samples (one array per sample, same shape) into the statistic."""


def _median_at(cells: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Median of every cell (rows of ``cells``, each sorted) resampled at ``positions`` (B x n).

    A cell is sorted, so the median of its values at some positions is its value at the median of
    those positions: the same number ``np.median(cell[positions], axis=-1)`` gives, without
    gathering and sorting B x n values per cell. Result: cells x B.
    """
    order = np.sort(positions, axis=-1)
    n = order.shape[-1]
    if n % 2:
        return cells[:, order[:, n // 2]]
    return 0.5 * (cells[:, order[:, n // 2 - 1]] + cells[:, order[:, n // 2]])


def bootstrap_median_cis(
    requests: Sequence[tuple[np.ndarray, ...]],
    combine: MedianStatistic,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> list[tuple[float | None, float | None]]:
    """Percentile bootstrap CIs of ``combine(median(s1), median(s2), ...)`` for many requests at once.

    A request is a tuple of samples, each a sorted array (see :func:`clean_values`), resampled
    independently. Requests with the same sample sizes share one ``scipy.stats.bootstrap`` call:
    scipy resamples the positions ``0..n-1`` of each sample (exactly the draws it makes when given
    the values themselves, since those draws depend only on n and the seeded generator) and the
    vectorised statistic maps them to the statistic of every stacked cell at once. So each CI is the
    one a separate ``scipy.stats.bootstrap`` call on that cell's values would give, bit for bit,
    whatever else is in the batch.

    Percentile rather than BCa: BCa's jackknife acceleration is unstable or undefined (NaN) for
    medians of 2-5 repeats, which is exactly the sample size of a benchmark ladder, while the
    percentile interval is always defined and stays within the observed range of the statistic.
    ``batch`` stays None (all resamples of positions drawn at once, B x n integers): memory is
    bounded by the number of cells per call instead, and the draws stay those of an unbatched call.
    """
    out: list[tuple[float | None, float | None]] = [(None, None)] * len(requests)
    groups: dict[tuple[int, ...], dict[bytes, list[int]]] = {}
    for index, samples in enumerate(requests):
        if any(s.size < 2 for s in samples):
            continue
        if all(s[0] == s[-1] for s in samples):
            # Degenerate data: every resample gives the same statistic, so the CI is that point.
            point = finite_or_none(combine(*(np.asarray([s[0]]) for s in samples))[0])
            out[index] = (point, point)
            continue
        sizes = tuple(int(s.size) for s in samples)
        key = b"".join(s.tobytes() for s in samples)  # equal data is bootstrapped once
        groups.setdefault(sizes, {}).setdefault(key, []).append(index)
    for sizes, by_data in sorted(groups.items()):
        members = list(by_data.values())
        for start in range(0, len(members), _CELLS_PER_CALL):
            chunk = members[start : start + _CELLS_PER_CALL]
            stacked = [np.stack([requests[m[0]][j] for m in chunk]) for j in range(len(sizes))]

            def statistic(
                *positions: np.ndarray, axis: int = -1, cells: list[np.ndarray] = stacked
            ) -> np.ndarray:
                return combine(*(_median_at(c, p) for c, p in zip(cells, positions, strict=True)))

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = stats.bootstrap(
                    tuple(np.arange(n) for n in sizes),
                    statistic,
                    n_resamples=n_resamples,
                    vectorized=True,
                    paired=False,
                    confidence_level=confidence,
                    method="percentile",
                    rng=np.random.default_rng(seed),
                )
            lows = np.atleast_1d(res.confidence_interval.low)
            highs = np.atleast_1d(res.confidence_interval.high)
            for row, same in enumerate(chunk):
                ci = (finite_or_none(lows[row]), finite_or_none(highs[row]))
                for index in same:
                    out[index] = ci
    return out


def _identity(m: np.ndarray) -> np.ndarray:
    return m


def bootstrap_median_ci(
    samples: tuple[np.ndarray, ...],
    combine: MedianStatistic = _identity,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> tuple[float | None, float | None]:
    """One request of :func:`bootstrap_median_cis` (default: the CI of the median of one sample)."""
    return bootstrap_median_cis(
        [samples], combine, confidence=confidence, n_resamples=n_resamples, seed=seed
    )[0]


def summarize_many(
    samples: Sequence[Sequence[float]],
    *,
    noisy_cv: float = 0.05,
    min_n: int = 3,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
) -> list[Summary]:
    """:func:`summarize` of many samples, their bootstraps batched (same results, much faster)."""
    arrays = [clean_values(v) for v in samples]
    cis = bootstrap_median_cis(
        [(a,) for a in arrays], _identity, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    return [_summary(a, ci, noisy_cv, min_n, confidence) for a, ci in zip(arrays, cis, strict=True)]


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
    return summarize_many(
        [values], noisy_cv=noisy_cv, min_n=min_n, confidence=confidence, n_resamples=n_resamples, seed=seed
    )[0]


def _summary(
    arr: np.ndarray, ci: tuple[float | None, float | None], noisy_cv: float, min_n: int, confidence: float
) -> Summary:
    n = int(arr.size)
    if n == 0:
        return Summary(0, None, None, None, None, None, None, None, None, confidence, True, ("no values",))
    median = sorted_median(arr)
    values = arr.tolist()  # a handful of floats: plain Python beats numpy's per-call overhead
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n >= 2 else None
    cv = std / abs(mean) if std is not None and mean != 0 else None
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
        ci_low=ci[0],
        ci_high=ci[1],
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


@lru_cache(maxsize=256)
def _rank_sum_counts(n1: int, n2: int) -> np.ndarray:
    """Number of splits of the ranks 1..n1+n2 whose first n1 ranks sum to s, indexed by s.

    The exact null distribution of the rank sum without ties (a table that depends only on the
    sizes: cached). Dynamic programme over the ranks, counting subsets by size and sum.
    """
    n = n1 + n2
    top = n * (n + 1) // 2
    counts = np.zeros((n1 + 1, top + 1))
    counts[0, 0] = 1.0
    for rank in range(1, n + 1):
        counts[1:, rank:] += counts[:-1, : top + 1 - rank].copy()
    return counts[n1]


@lru_cache(maxsize=256)
def _splits(n1: int, n2: int) -> np.ndarray:
    """Every choice of n1 positions out of n1+n2, one row each (small sizes only: see the limits)."""
    rows = list(itertools.combinations(range(n1 + n2), n1))
    return np.asarray(rows, dtype=np.intp).reshape(len(rows), n1)


def _midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks (``scipy.stats.rankdata``'s default)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2.0)[inverse]


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float | None:
    """Two-sided Mann-Whitney U p-value, exact for small samples even with ties.

    scipy's "auto" falls back to the normal approximation when values tie, which for 3 vs 3
    reports p < 0.05 although no split of six runs can be that unlikely; an exhaustive
    permutation test gives the exact p instead. Large samples use the normal approximation.
    None when a sample has fewer than two values.

    The exact cases are computed here (scipy's own exact and permutation paths cost about 1 and 5 ms
    a call, mostly argument handling, times hundreds of comparisons per release): the rank sum of
    ``x`` against its exact null distribution, p = 2 min(P(R <= r), P(R >= r)) capped at 1, the
    same p as ``scipy.stats.mannwhitneyu(method="exact")`` without ties and as its exhaustive
    ``PermutationMethod`` with ties (tests compare both).
    """
    if x.size < 2 or y.size < 2:
        return None
    n1, n2 = int(x.size), int(y.size)
    pooled = np.concatenate([x, y])
    splits = math.comb(n1 + n2, n1)
    ties = len(set(pooled.tolist())) < n1 + n2
    if not ties and splits <= _EXACT_LIMIT:
        counts = _rank_sum_counts(n1, n2)
        # No ties: the rank of x[i] in the pooled sample is i + 1 + #(y < x[i]).
        r = n1 * (n1 + 1) // 2 + int(np.searchsorted(np.sort(y), x).sum())
        less, greater = counts[: r + 1].sum(), counts[r:].sum()
        return min(1.0, 2.0 * float(min(less, greater)) / splits)
    if ties and splits <= _EXACT_PERMUTATION_LIMIT:
        ranks = _midranks(pooled)  # sums of midranks are multiples of 0.5: exact in floating point
        null = ranks[_splits(n1, n2)].sum(axis=1)
        r = float(ranks[:n1].sum())
        less = int(np.count_nonzero(null <= r + 1e-9))
        greater = int(np.count_nonzero(null >= r - 1e-9))
        return min(1.0, 2.0 * min(less, greater) / splits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    p = finite_or_none(res.pvalue)
    return None if p is None else min(1.0, p)
