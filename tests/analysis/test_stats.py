import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ablate.backend.analysis.comparison import Pair, compare_many, compare_samples
from ablate.backend.analysis.stats import (
    bootstrap_median_cis,
    mann_whitney_p,
    min_possible_p,
    summarize,
    summarize_many,
)

from .helpers import N_RESAMPLES, assert_no_nan, scipy_ci

values_st = st.lists(st.floats(1.0, 1e6, allow_nan=False), min_size=2, max_size=8)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


def test_summary_numbers_match_numpy_and_scipy():
    vals = [103.0, 98.0, 100.0, 101.5, 97.0]
    s = summarize(vals, n_resamples=N_RESAMPLES, seed=3)
    arr = np.array(vals)
    assert s.n == 5
    assert s.median == pytest.approx(np.median(arr))
    assert s.mean == pytest.approx(arr.mean())
    assert s.std == pytest.approx(arr.std(ddof=1))
    assert s.cv == pytest.approx(arr.std(ddof=1) / arr.mean())
    assert (s.min, s.max) == (97.0, 103.0)
    lo, hi = scipy_ci([vals], _median, seed=3)
    assert (s.ci_low, s.ci_high) == pytest.approx((lo, hi))
    assert s.ci_low <= s.median <= s.ci_high
    assert not s.noisy and s.reasons == ()
    assert isinstance(s.median, float) and not isinstance(s.median, np.floating)


def test_noisy_flags():
    assert summarize([1.0, 2.0], n_resamples=N_RESAMPLES).reasons == ("n<3", "cv>5%")
    s = summarize([100.0, 150.0, 50.0], n_resamples=N_RESAMPLES)
    assert s.noisy and s.reasons == ("cv>5%",)
    s = summarize([100.0, 101.0, 102.0], noisy_cv=0.001, min_n=4, n_resamples=N_RESAMPLES)
    assert s.reasons == ("n<4", "cv>0.1%")


def test_single_value():
    s = summarize([5.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (1, 5.0, 5.0, 5.0, 5.0)
    assert s.std is None and s.cv is None and s.ci_low is None and s.ci_high is None
    assert s.noisy and "n<3" in s.reasons
    assert_no_nan(s)


def test_empty():
    s = summarize([])
    assert s.n == 0 and s.median is None and s.noisy and s.reasons == ("no values",)
    assert_no_nan(s)


def test_all_equal_values_degenerate_ci_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = summarize([7.0, 7.0, 7.0, 7.0])
    assert (s.ci_low, s.ci_high) == (7.0, 7.0)
    assert s.std == 0.0 and s.cv == 0.0
    assert_no_nan(s)


def test_zero_mean_has_no_cv():
    s = summarize([-1.0, 0.0, 1.0], n_resamples=N_RESAMPLES)
    assert s.cv is None
    assert_no_nan(s)


def test_non_finite_rejected():
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


def test_deterministic():
    a = summarize([1.0, 2.0, 3.5, 2.2], n_resamples=N_RESAMPLES)
    b = summarize([1.0, 2.0, 3.5, 2.2], n_resamples=N_RESAMPLES)
    assert a == b


@settings(max_examples=50, deadline=None)
@given(vals=values_st, data=st.data())
def test_permutation_invariant(vals, data):
    perm = data.draw(st.permutations(vals))
    assert summarize(vals, n_resamples=N_RESAMPLES) == summarize(perm, n_resamples=N_RESAMPLES)


@settings(max_examples=50, deadline=None)
@given(vals=values_st, k=st.floats(1e-3, 1e3))
def test_scale_equivariant(vals, k):
    a = summarize(vals, n_resamples=N_RESAMPLES)
    b = summarize([v * k for v in vals], n_resamples=N_RESAMPLES)
    for f in ("median", "mean", "std", "min", "max", "ci_low", "ci_high"):
        assert getattr(b, f) == pytest.approx(getattr(a, f) * k, rel=1e-9, abs=1e-12 * max(vals) * k)
    assert b.cv == pytest.approx(a.cv, rel=1e-9, abs=1e-12)
    assert_no_nan(b)


def test_min_possible_p():
    assert min_possible_p(3, 3) == pytest.approx(0.1)
    assert min_possible_p(4, 4) == pytest.approx(2 / 70)
    assert min_possible_p(1, 1) == 1.0
    assert min_possible_p(0, 3) is None


def test_mann_whitney_matches_scipy_exact_without_ties():
    x = np.array([1.0, 2.5, 3.0, 7.0])
    y = np.array([4.0, 5.0, 6.0, 8.0, 9.0])
    exact = stats.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue
    assert mann_whitney_p(x, y) == pytest.approx(exact)


def test_mann_whitney_exact_with_ties_never_below_floor():
    # scipy's normal approximation would say p~0.047 here; six runs cannot be that unlikely.
    p = mann_whitney_p(np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0]))
    assert p == pytest.approx(0.1)
    assert mann_whitney_p(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 1.0
    assert mann_whitney_p(np.array([1.0]), np.array([2.0, 3.0])) is None


def test_mann_whitney_large_uses_asymptotic():
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 30), rng.normal(1, 1, 30)
    expected = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").pvalue
    assert mann_whitney_p(x, y) == pytest.approx(expected)
    assert not math.isnan(mann_whitney_p(x, y))


# Batched analysis: the same numbers as one call at a time ------------------------------------------

samples_st = st.lists(
    st.lists(st.floats(1.0, 1e4, allow_nan=False), min_size=0, max_size=7), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(samples=samples_st)
def test_summarize_many_equals_one_at_a_time(samples):
    batched = summarize_many(samples, n_resamples=N_RESAMPLES, seed=2)
    assert batched == [summarize(s, n_resamples=N_RESAMPLES, seed=2) for s in samples]


@settings(max_examples=40, deadline=None)
@given(samples=samples_st, data=st.data())
def test_compare_many_equals_one_at_a_time(samples, data):
    pairs = [
        Pair(c, r, data.draw(st.sampled_from(["higher", "lower"])), f"c{i}", f"r{i}")
        for i, (c, r) in enumerate(zip(samples, reversed(samples), strict=True))
    ]
    batched = compare_many(pairs, n_resamples=N_RESAMPLES)
    single = [
        compare_samples(
            p.contender,
            p.reference,
            p.direction,
            contender_name=p.contender_name,
            reference_name=p.reference_name,
            n_resamples=N_RESAMPLES,
        )
        for p in pairs
    ]
    assert batched == single


def test_batched_interval_is_scipys_on_the_values_whatever_the_batch():
    """Each request's CI is scipy.stats.bootstrap run on that request's own values."""
    rng = np.random.default_rng(4)
    cells = [np.sort(rng.normal(100, 3, n)) for n in (5, 5, 4, 5, 6, 5)]
    cis = bootstrap_median_cis([(c,) for c in cells], lambda m: m, n_resamples=N_RESAMPLES, seed=9)
    for cell, ci in zip(cells, cis, strict=True):
        assert ci == pytest.approx(scipy_ci([cell], _median, seed=9), rel=1e-12)
    # The same cell among others or alone: identical bytes.
    alone = bootstrap_median_cis([(cells[3],)], lambda m: m, n_resamples=N_RESAMPLES, seed=9)
    assert alone[0] == cis[3]


@settings(max_examples=80, deadline=None)
@given(
    x=st.lists(st.integers(0, 4), min_size=2, max_size=6),
    y=st.lists(st.integers(0, 4), min_size=2, max_size=6),
)
def test_mann_whitney_with_ties_matches_scipy_exhaustive_permutation(x, y):
    xa, ya = np.sort(np.array(x, float)), np.sort(np.array(y, float))
    if np.unique(np.concatenate([xa, ya])).size == xa.size + ya.size:
        ref = stats.mannwhitneyu(xa, ya, alternative="two-sided", method="exact").pvalue
    else:
        ref = stats.mannwhitneyu(
            xa, ya, alternative="two-sided", method=stats.PermutationMethod(n_resamples=5000)
        ).pvalue
    assert mann_whitney_p(xa, ya) == pytest.approx(min(1.0, ref), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    x=st.lists(st.floats(0, 1e3, allow_nan=False), min_size=2, max_size=9, unique=True),
    y=st.lists(st.floats(0, 1e3, allow_nan=False), min_size=2, max_size=9, unique=True),
)
def test_mann_whitney_without_ties_matches_scipy_exact(x, y):
    if set(x) & set(y):
        return
    xa, ya = np.array(x), np.array(y)
    ref = stats.mannwhitneyu(xa, ya, alternative="two-sided", method="exact").pvalue
    assert mann_whitney_p(xa, ya) == pytest.approx(ref, abs=1e-12)
