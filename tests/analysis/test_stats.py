import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ablate.backend.analysis.comparison import Pair, compare_many, compare_samples
from ablate.backend.analysis.stats import (
    BH_METHOD,
    TWO_VALUES_LOG_TEST,
    TWO_VALUES_MAX_DF,
    WELCH_LOG_TEST,
    bh_adjust,
    clean_values,
    cv_upper_bound,
    summarize,
    summarize_many,
)
from ablate.backend.analysis.welch import welch_log

from .helpers import assert_no_nan

values_st = st.lists(st.floats(1.0, 1e6, allow_nan=False), min_size=2, max_size=8)


def log_t_ci(vals, confidence=0.95):
    y = np.log(np.asarray(vals, dtype=float))
    half = stats.t.ppf(0.5 + confidence / 2, y.size - 1) * y.std(ddof=1) / math.sqrt(y.size)
    return math.exp(y.mean() - half), math.exp(y.mean() + half)


def test_summary_numbers_match_numpy_and_scipy():
    vals = [103.0, 98.0, 100.0, 101.5, 97.0]
    s = summarize(vals)
    arr = np.array(vals)
    assert s.n == 5
    assert s.median == pytest.approx(np.median(arr))
    assert s.mean == pytest.approx(arr.mean())
    assert s.std == pytest.approx(arr.std(ddof=1))
    assert s.cv == pytest.approx(arr.std(ddof=1) / arr.mean())
    assert (s.min, s.max) == (97.0, 103.0)
    assert (s.ci_low, s.ci_high) == pytest.approx(log_t_ci(vals))
    assert s.ci_low <= s.median <= s.ci_high
    assert s.ci_method.startswith("t-interval on log values")
    # CV 2.5% from 5 repeats: its median-unbiased CV is under 5%, clean (the 95% bound, 5.8%,
    # flagged 34% of clean CV-2% rungs at n = 5).
    assert not s.noisy and s.reasons == () and 0.025 < s.cv_upper < 0.03
    assert isinstance(s.median, float) and not isinstance(s.median, np.floating)


def test_cv_upper_bound_is_the_chi_square_bound():
    vals = np.sort(np.array([100.0, 101.0, 99.0, 100.5, 99.5]))
    sd = np.log(vals).std(ddof=1)
    sigma = sd * math.sqrt(4 / stats.chi2.ppf(0.05, 4))
    assert cv_upper_bound(vals) == pytest.approx(math.sqrt(math.expm1(sigma**2)))
    assert cv_upper_bound(np.array([1.0])) is None
    # Non-positive data: on the raw values.
    raw = np.sort(np.array([-1.0, 2.0, 3.0]))
    assert cv_upper_bound(raw) == pytest.approx(
        raw.std(ddof=1) * math.sqrt(2 / stats.chi2.ppf(0.05, 2)) / abs(raw.mean())
    )


def test_noisy_flags_read_the_median_unbiased_cv():
    assert summarize([1.0, 2.0]).reasons[0] == "n<3"
    s = summarize([100.0, 150.0, 50.0])
    assert s.noisy and s.reasons == ("cv about 75% (median-unbiased) > 5%",)
    # The 50% chi-square bound: sd * sqrt((n-1) / chi2_0.5(n-1)), 1.2x the estimate at n = 3.
    s3 = summarize([100.0, 101.5, 99.0])
    sd = np.log([99.0, 100.0, 101.5]).std(ddof=1)
    assert s3.cv_upper == pytest.approx(math.sqrt(math.expm1(sd**2 * 2 / stats.chi2.ppf(0.5, 2))))
    assert s3.cv < s3.cv_upper < 0.05 and not s3.noisy
    # A loaded host's spread (CV ~8%) at 5 repeats is flagged.
    s5 = summarize([100.0, 112.0, 90.0, 104.0, 95.0])
    assert s5.noisy and s5.reasons[0].startswith("cv about ")
    s = summarize([100.0, 101.0, 102.0], noisy_cv=0.001, min_n=4)
    assert s.reasons[0] == "n<4" and s.reasons[1].startswith("cv about")


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
    assert (s.ci_low, s.ci_high) == pytest.approx((7.0, 7.0))
    assert s.std == 0.0 and s.cv == 0.0
    assert_no_nan(s)


def test_zero_mean_has_no_cv():
    s = summarize([-1.0, 0.0, 1.0])
    assert s.cv is None and s.cv_upper is None
    assert s.ci_method.startswith("t-interval of the mean")
    assert_no_nan(s)


def test_non_finite_rejected():
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])


@settings(max_examples=50, deadline=None)
@given(vals=values_st, data=st.data())
def test_permutation_invariant(vals, data):
    perm = data.draw(st.permutations(vals))
    assert summarize(vals) == summarize(perm)


@settings(max_examples=50, deadline=None)
@given(vals=values_st, k=st.floats(1e-3, 1e3))
def test_scale_equivariant(vals, k):
    a = summarize(vals)
    b = summarize([v * k for v in vals])
    for f in ("median", "mean", "std", "min", "max", "ci_low", "ci_high"):
        assert getattr(b, f) == pytest.approx(getattr(a, f) * k, rel=1e-9, abs=1e-12 * max(vals) * k)
    assert b.cv == pytest.approx(a.cv, rel=1e-9, abs=1e-12)
    assert b.cv_upper == pytest.approx(a.cv_upper, rel=1e-6, abs=1e-12)
    assert_no_nan(b)


# Welch's t on log values ----------------------------------------------------------------------


def test_welch_log_matches_scipy():
    c = clean_values([105.0, 103.0, 107.5, 104.0])
    r = clean_values([100.0, 101.0, 99.0, 100.5, 98.0])
    w = welch_log(c, r)
    ref = stats.ttest_ind(np.log(c), np.log(r), equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert w.method == WELCH_LOG_TEST
    assert w.log_ratio == pytest.approx(np.log(c).mean() - np.log(r).mean())
    assert w.p_value == pytest.approx(ref.pvalue)
    assert w.df == pytest.approx(ref.df)
    assert (w.log_low, w.log_high) == pytest.approx((ci.low, ci.high))


def test_two_values_a_side_cap_the_welch_df():
    """Welch's SE and Satterthwaite df, the df capped at 1.25 where a side has 2 values."""
    c = clean_values([105.0, 103.0])
    r = clean_values([100.0, 101.0, 99.0, 100.5, 98.0])
    w = welch_log(c, r)
    ref = stats.ttest_ind(np.log(c), np.log(r), equal_var=False)
    se = math.sqrt(np.var(np.log(c), ddof=1) / 2 + np.var(np.log(r), ddof=1) / 5)
    df = min(float(ref.df), TWO_VALUES_MAX_DF)
    assert w.method == TWO_VALUES_LOG_TEST and w.df == pytest.approx(df) and w.se == pytest.approx(se)
    assert w.p_value == pytest.approx(2 * stats.t.sf(abs(ref.statistic), df))
    half = stats.t.ppf(0.975, df) * se
    assert (w.log_low, w.log_high) == pytest.approx((w.log_ratio - half, w.log_ratio + half))


def test_welch_log_not_testable_and_degenerate():
    assert welch_log(clean_values([1.0]), clean_values([1.0, 2.0])) is None
    assert welch_log(clean_values([0.0, 1.0]), clean_values([1.0, 2.0])) is None
    same = welch_log(clean_values([5.0, 5.0, 5.0]), clean_values([5.0, 5.0, 5.0]))
    assert same.p_value == 1.0 and same.log_low == same.log_high == 0.0
    moved = welch_log(clean_values([6.0, 6.0, 6.0]), clean_values([5.0, 5.0, 5.0]))
    assert moved.p_value == 0.0 and moved.log_low == moved.log_high == pytest.approx(math.log(1.2))


def test_three_repeats_a_side_can_be_significant():
    # The exact Mann-Whitney test could never reach p < 0.05 here (its floor was 0.1).
    c = compare_samples([80.0, 80.5, 79.5], [100.0, 101.0, 99.0], "higher")
    assert c.testable and c.significant and c.p_value < 0.001
    assert c.ci_high < 1.0 and c.ratio == pytest.approx(
        math.exp(np.log([80, 80.5, 79.5]).mean()) / math.exp(np.log([100, 101, 99]).mean())
    )


# Benjamini-Hochberg ---------------------------------------------------------------------------


def test_bh_matches_scipy_and_skips_none():
    p = [0.01, None, 0.04, 0.03, 0.5]
    q = bh_adjust(p)
    ref = stats.false_discovery_control([0.01, 0.04, 0.03, 0.5])
    assert q[1] is None
    assert [q[0], q[2], q[3], q[4]] == pytest.approx(list(ref))
    assert bh_adjust([]) == [] and bh_adjust([None]) == [None]
    assert bh_adjust([0.02]) == [0.02]


def test_bh_by_hand():
    # Sorted p 0.01, 0.02, 0.03, 0.2 of m = 4: p * m / rank = 0.04, 0.04, 0.04, 0.2 (monotone).
    assert bh_adjust([0.03, 0.2, 0.01, 0.02]) == pytest.approx([0.04, 0.2, 0.04, 0.04])


# Batched analysis -----------------------------------------------------------------------------

samples_st = st.lists(
    st.lists(st.floats(1.0, 1e4, allow_nan=False), min_size=0, max_size=7), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(samples=samples_st)
def test_summarize_many_equals_one_at_a_time(samples):
    assert summarize_many(samples) == [summarize(s) for s in samples]


@settings(max_examples=40, deadline=None)
@given(samples=samples_st, data=st.data())
def test_compare_many_adjusts_the_batch_as_one_family(samples, data):
    pairs = [
        Pair(c, r, data.draw(st.sampled_from(["higher", "lower"])), f"c{i}", f"r{i}")
        for i, (c, r) in enumerate(zip(samples, reversed(samples), strict=True))
    ]
    batched = compare_many(pairs)
    single = [
        compare_samples(
            p.contender,
            p.reference,
            p.direction,
            contender_name=p.contender_name,
            reference_name=p.reference_name,
        )
        for p in pairs
    ]
    for b, s in zip(batched, single, strict=True):
        assert (b.ratio, b.ci_low, b.ci_high, b.p_value, b.reasons) == (
            s.ratio,
            s.ci_low,
            s.ci_high,
            s.p_value,
            s.reasons,
        )
        assert s.q_value == s.p_value and s.adjustment == "none"
        assert b.adjustment == BH_METHOD
        assert b.significant == (b.q_value is not None and b.q_value < 0.05)
    assert [b.q_value for b in batched] == bh_adjust([s.p_value for s in single])


def test_a_huge_cv_bound_is_written_without_an_exponent() -> None:
    """The report printed "cv up to 1.6e+02%"."""
    (reason,) = summarize([1.0, 3.0, 9.0, 2.0, 7.0]).reasons
    assert reason.startswith("cv about ") and "e+" not in reason
    bound = float(reason.removeprefix("cv about ").split("%")[0])
    assert bound >= 100
