"""Descriptive statistics of repeated runs, and the small statistical building blocks others share.

Methods are chosen for the sample sizes benchmarks run (2-10 repeats) and proven by the seeded
simulation in ``benchmarks/stats_simulation.py`` (figures in docs/statistics.md):

* one sample: a t-interval on the log values (:data:`SUMMARY_CI_METHOD`), which covers the median
  93-97% of the time from n = 2 under normal and log-normal noise (the percentile bootstrap of the
  median it replaces covered 44-79% at n = 2-3);
* two samples: Welch's t on the log values (:func:`welch_log`), i.e. the ratio of geometric means
  with a Welch-Satterthwaite interval; testable from 2 values a side (the exact Mann-Whitney test
  it replaces could not reach p < 0.05 below 4 vs 4);
* many tests of one release: Benjamini-Hochberg adjusted p-values (:func:`bh_adjust`);
* the noisy flag: the median-unbiased CV, the 50% one-sided bound of :func:`cv_upper_bound`.

All results are plain Python floats or None, never NaN, so they serialise to JSON unchanged.
Every random step is seeded, and inputs are sorted first, so the same multiset of values always
gives byte-identical output whatever order the runs were recorded in.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy import special, stats

from ablate.backend.domain.statistics import CONFIDENCE, MIN_N, NOISY_CV


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
    ci_low: float | None  # t-interval of the median on log values (SUMMARY_CI_METHOD); None when n < 2
    ci_high: float | None
    confidence: float
    noisy: bool
    reasons: tuple[str, ...]
    # The CV the noisy flag reads: its median-unbiased estimate (the 50% one-sided chi-square bound).
    cv_upper: float | None = None
    ci_method: str = ""

    @property
    def shown_noisy(self) -> bool:
        """The noisy flag as tables and histories show it: a sample without values is empty, not noisy."""
        return bool(self.n) and self.noisy


def clean_values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Values as a sorted float array; sorting makes every seeded resample order-independent."""
    if isinstance(values, np.ndarray | list | tuple):
        arr = np.array(values, dtype=float)  # no detour through Python floats; a copy to sort in place
    else:
        arr = np.array(list(values), dtype=float)
    arr.sort()
    # Sorted, a NaN is last and an infinity first or last: the ends say whether all are finite.
    if arr.size and not (math.isfinite(arr[0]) and math.isfinite(arr[-1])):
        raise ValueError("values must be finite numbers")
    return arr


def clean_many(samples: Sequence[Sequence[float] | np.ndarray]) -> list[np.ndarray]:
    """:func:`clean_values` of every sample, the samples of one size as one array sorted along its
    rows (each row holds the values, in the order, that sorting the sample alone gives): thousands of
    small samples without an array and a sort each. The rows are views of their block: read them,
    never change them."""
    out: list[np.ndarray] = [_EMPTY] * len(samples)
    by_size: dict[int, list[int]] = {}
    for i, values in enumerate(samples):
        if isinstance(values, np.ndarray | list | tuple):
            by_size.setdefault(len(values), []).append(i)
        else:  # a generator or other iterable: no length to group by
            out[i] = clean_values(values)
    for n, rows in by_size.items():
        block = np.array([samples[i] for i in rows], dtype=float).reshape(len(rows), n)
        block.sort(axis=1)
        if n and not (np.isfinite(block[:, 0]).all() and np.isfinite(block[:, -1]).all()):
            raise ValueError("values must be finite numbers")
        for i, row in zip(rows, block, strict=True):
            out[i] = row
    return out


_EMPTY = np.empty(0)


def sorted_median(arr: np.ndarray) -> float:
    """Median of a sorted, non-empty array (see :func:`clean_values`), as a Python float.

    The same number ``np.median`` gives (the middle value, or the mean of the two middle ones),
    without its overhead: it is taken for every cell and comparison of a release.
    """
    n = arr.size
    mid = n // 2
    return float(arr[mid]) if n % 2 else float(0.5 * (arr[mid - 1] + arr[mid]))


# Ratios and intervals are carried as logs, which stay finite for any values in the accepted range
# (1e-300 beside 1e15 is a log ratio of 725, past exp's 709.8). What is shown is exp of the log
# clamped to +-LOG_SHOWN: the shown value, its reciprocal and its log stay finite, normal floats.
LOG_SHOWN = math.log(1e300)
CLAMPED_NOTE = "ratio or interval beyond 1e+-300: shown clamped at the bound"


def exp_shown(log_value: float) -> float:
    """exp of a log value clamped to [1e-300, 1e300] (see :data:`LOG_SHOWN`); exact inside that range."""
    return math.exp(min(max(log_value, -LOG_SHOWN), LOG_SHOWN))


def beyond_shown(*log_values: float | None) -> bool:
    """Whether any of these log values is past what :func:`exp_shown` can show unclamped."""
    return any(v is not None and abs(v) > LOG_SHOWN for v in log_values)


def finite_or_none(x: float | np.floating | None) -> float | None:
    """A Python float, or None for None/NaN/inf (NaN must never leak into a report)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


SUMMARY_CI_METHOD = "t-interval on log values (median of log-symmetric noise)"
SUMMARY_CI_METHOD_RAW = "t-interval of the mean (non-positive values)"
NOISY_METHOD = "median-unbiased CV (chi-square, 50% one-sided bound) above the threshold"
# The noisy flag reads the CV's 50% bound (median-unbiased): the 95% bound flagged 32% of clean CV-2%
# rungs at n=5 (73% at n=3); this one <= 1.3% of them and 86% of loaded CV-8% rungs at n=5.
NOISY_CONFIDENCE = 0.5


# Student's t and chi-square through scipy.special, the functions scipy.stats.t and chi2 call
# underneath: bit for bit the same numbers (tests/analysis/test_stats_special.py), without the
# distribution objects' argument checks and broadcasting (~100 us a call, most of a comparison's
# CPU: a release of 100 cells makes about 1,700 such calls).


@functools.lru_cache(maxsize=4096)  # whole df (n - 1 of a sample) recur on every cell of a release
def t_critical(confidence: float, df: float) -> float:
    """Two-sided critical value of Student's t (df may be fractional: Welch-Satterthwaite)."""
    return float(special.stdtrit(df, 0.5 + confidence / 2.0))


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of a t statistic: 2 P(T > |t|), as ``2 * stats.t.sf(abs(t), df)``."""
    return float(2.0 * special.stdtr(df, -abs(t)))


def t_two_sided_p_many(t: Sequence[float], df: Sequence[float]) -> list[float]:
    """:func:`t_two_sided_p` of each pair, in one ufunc call: element by element, so the same bits."""
    if not t:
        return []
    return (2.0 * special.stdtr(np.asarray(df, dtype=float), -np.abs(np.asarray(t, dtype=float)))).tolist()


@functools.lru_cache(maxsize=1024)
def chi2_quantile(q: float, df: float) -> float:
    """Lower quantile of chi-square, as ``stats.chi2.ppf(q, df)``."""
    return float(2.0 * special.gammaincinv(df / 2.0, q))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std of sorted values; exactly (value, 0) when all are equal (no rounding)."""
    if values[0] == values[-1]:
        return float(values[0]), 0.0
    mean, sd = scaled_mean_sd(values)
    return mean, sd if sd is not None else 0.0


def scaled_mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample std (None below two values), overflow-safe: any finite values give a finite
    mean (a sum of values near 1e308 would overflow), and the std is inf rather than an error."""
    n = len(values)
    # Scaled only where squares could overflow, so ordinary samples keep their exact old figures.
    top = max(map(abs, values))
    scale = top if top > 1e150 else 1.0
    scaled = [v / scale for v in values] if scale != 1.0 else list(values)
    m = math.fsum(scaled) / n
    mean = m * scale
    if n < 2:
        return mean, None
    return mean, math.sqrt(math.fsum([(v - m) ** 2 for v in scaled]) / (n - 1)) * scale


def log_t_interval(
    arr: np.ndarray, confidence: float = CONFIDENCE, moments: tuple[float, float] | None = None
) -> tuple[float | None, float | None]:
    """t-interval of exp(mean(log x)) for a sorted sample: the median when log-noise is symmetric.

    Exact under log-normal noise and within a fraction of a point of 95% under normal noise at
    CV <= 5% (benchmarks/stats_simulation.py). Non-positive values: the t-interval of the mean instead.
    None below two values. ``moments``: :func:`sample_moments` of ``arr``, when already found.
    """
    n = int(arr.size)
    if n < 2:
        return None, None
    tcrit = t_critical(confidence, n - 1)
    m, sd = moments or sample_moments(arr)
    if arr[0] > 0:
        half = tcrit * sd / math.sqrt(n)
        return exp_shown(m - half), exp_shown(m + half)
    half = tcrit * sd / math.sqrt(n)
    return finite_or_none(m - half), finite_or_none(m + half)


def cv_upper_bound(
    arr: np.ndarray, confidence: float = CONFIDENCE, moments: tuple[float, float] | None = None
) -> float | None:
    """One-sided upper confidence bound of the coefficient of variation of a sorted sample.

    (n-1) s^2 / sigma^2 is chi-square with n-1 df, so sigma <= s sqrt((n-1) / chi2_{1-c}(n-1)) with
    confidence c. On log values for positive data (then CV = sqrt(exp(sigma^2) - 1)), else on the
    raw values over |mean|. None below two values or for a zero mean. ``moments``: as log_t_interval's.
    """
    n = int(arr.size)
    if n < 2:
        return None
    factor = math.sqrt((n - 1) / chi2_quantile(1.0 - confidence, n - 1))
    mean, sd = moments or sample_moments(arr)
    if arr[0] > 0:
        var = (sd * factor) ** 2
        # Past exp's range (wildly spread data) the bound is astronomically large: cap it, stay finite.
        return math.sqrt(math.expm1(var)) if var < 700 else 1e300
    return finite_or_none(sd * factor / abs(mean)) if mean != 0 else None


def sample_moments(arr: np.ndarray, logs: list[float] | None = None) -> tuple[float, float]:
    """(mean, sd) of a sorted sample of 2+ values: of its logs when all are positive (``logs``, when
    already taken), else of the values."""
    if arr[0] > 0:
        return mean_sd(np.log(arr).tolist() if logs is None else logs)
    return mean_sd(arr.tolist())


def summarize_many(
    samples: Sequence[Sequence[float] | np.ndarray],
    *,
    noisy_cv: float = NOISY_CV,
    min_n: int = MIN_N,
    confidence: float = CONFIDENCE,
    cleaned: bool = False,
) -> list[Summary]:
    """:func:`summarize` of many samples, the logs of all in one call. ``cleaned``: every sample is
    already a :func:`clean_values` array (not cleaned again)."""
    arrays = [cast(np.ndarray, v) if cleaned else clean_values(v) for v in samples]
    logged = [a for a in arrays if a.size >= 2 and a[0] > 0]
    logs = np.log(np.concatenate(logged)).tolist() if logged else []
    out, at = [], 0
    for a in arrays:
        moments = None
        if a.size >= 2:
            own = None
            if a[0] > 0:
                own, at = logs[at : at + a.size], at + a.size
            moments = sample_moments(a, own)
        out.append(_summary(a, noisy_cv, min_n, confidence, moments))
    return out


def summarize(
    values: Sequence[float],
    *,
    noisy_cv: float = NOISY_CV,
    min_n: int = MIN_N,
    confidence: float = CONFIDENCE,
) -> Summary:
    """Median, mean, spread and a t-interval of the median on log values; flags samples too small
    or noisy. Noisy means the median-unbiased CV (the 50% one-sided chi-square bound) exceeds
    ``noisy_cv``."""
    return summarize_many([values], noisy_cv=noisy_cv, min_n=min_n, confidence=confidence)[0]


def _summary(
    arr: np.ndarray, noisy_cv: float, min_n: int, confidence: float, moments: tuple[float, float] | None
) -> Summary:
    n = int(arr.size)
    if n == 0:
        return Summary(0, None, None, None, None, None, None, None, None, confidence, True, ("no values",))
    median = sorted_median(arr)
    values = arr.tolist()  # a handful of floats: plain Python beats numpy's per-call overhead
    mean, std = scaled_mean_sd(values)
    cv = std / abs(mean) if std is not None and mean != 0 else None
    ci = log_t_interval(arr, confidence, moments)
    upper = cv_upper_bound(arr, NOISY_CONFIDENCE, moments)
    reasons: list[str] = []
    if n < min_n:
        reasons.append(f"n<{min_n}")
    if upper is not None and upper > noisy_cv:
        bound = upper * 100  # two significant digits, never an exponent ("1.6e+02%")
        said = f"{bound:.2g}" if bound < 100 else f"{bound:.0f}"
        reasons.append(f"cv about {said}% (median-unbiased) > {noisy_cv * 100:g}%")
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
        cv_upper=upper,
        ci_method=(SUMMARY_CI_METHOD if arr[0] > 0 else SUMMARY_CI_METHOD_RAW) if n >= 2 else "",
    )


WELCH_LOG_TEST = "welch-t on log values, two-sided"
MODERATED_LOG_TEST = (
    "welch-t on log values, each side's variance moderated toward the release's (empirical Bayes), two-sided"
)
# With a 2-value side, the Welch-Satterthwaite df is capped at this: the pooled t it replaces covered
# 56-82% when the 2-value side was 5x noisier, plain Welch 89-90% (2 vs 5, 2 vs 10); capped, 95-99.9%
# whatever the noise ratio (benchmarks/stats_simulation.py, table two_values), at a fraction of df 1's
# loss of power.
TWO_VALUES_MAX_DF = 1.25
TWO_VALUES_LOG_TEST = "welch-t on log values, df at most 1.25 (a side has 2 values), two-sided"
TWO_VALUES_NOTE = (
    "a side has 2 values: its noise is barely known, so the test takes at most 1.25 degrees of freedom "
    "(a wide interval that covers whatever each side's noise)"
)
WELCH_LOG_INTERVAL = "t-interval of the ratio of geometric means (welch-satterthwaite; df <= 1.25 at n=2)"
BH_METHOD = "benjamini-hochberg (false discovery rate) across the comparisons of one analysis"


# Spreads and differences of log values below this (values equal to about 12 significant digits)
# are float rounding, not measurement: scaling the same data by a constant moves them by a few
# units in the last place, and a t statistic of rounding over rounding is any number (p 0.29 or
# 0.42 for one sample scaled by 0.25, found by tests/analysis/test_regression.py). They count as 0.
LOG_RESOLUTION = 1e-12


def bh_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (q-values); None entries are left out of the family.

    Controls the expected share of false discoveries among the rejections at q < alpha, and the
    chance of any false rejection at alpha when nothing changed (``scipy.stats.false_discovery_control``).
    """
    known = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if known:
        q = stats.false_discovery_control(np.asarray([p_values[i] for i in known], dtype=float))
        for i, v in zip(known, np.atleast_1d(q).tolist(), strict=True):
            out[i] = min(1.0, float(v))
    return out


def family_q_values(p_values: Sequence[float | None], adjust: bool) -> tuple[list[float | None], str]:
    """(the q-values, the adjustment's name) of one family of tests: :func:`bh_adjust` and
    :data:`BH_METHOD` when ``adjust``, else the p-values as they are and "none"."""
    if adjust:
        return bh_adjust(p_values), BH_METHOD
    return list(p_values), "none"
