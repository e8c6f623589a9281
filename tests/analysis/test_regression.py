import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ablate.backend.analysis.regression import compare_releases, lookback

from .helpers import N_RESAMPLES, assert_no_nan, scipy_ci


def run(b, c, metric="throughput_tokens_per_s", **kw):
    kw.setdefault("n_resamples", N_RESAMPLES)
    return compare_releases(b, c, metric, **kw)


def pct(c, b, axis=-1):
    mb = np.median(b, axis=axis)
    return (np.median(c, axis=axis) - mb) / np.abs(mb) * 100


OLD = [1000.0, 1010.0, 995.0, 1004.0, 998.0]
NEW = [940.0, 951.0, 936.0, 944.0, 948.0]


def test_regression_numbers_recomputed():
    r = run(OLD, NEW, seed=5)
    change = (np.median(NEW) - np.median(OLD)) / np.median(OLD) * 100
    assert r.change_pct == pytest.approx(change)
    assert r.improvement_pct == pytest.approx(change)
    assert (r.change_ci_low, r.change_ci_high) == pytest.approx(scipy_ci([NEW, OLD], pct, seed=5))
    assert r.p_value == pytest.approx(stats.mannwhitneyu(NEW, OLD, method="exact").pvalue)
    assert r.verdict == "regressed" and r.indicated == "regressed"
    assert r.significant and r.exceeds_threshold and r.conclusive
    assert (r.threshold_pct, r.alpha, r.test) == (3.0, 0.05, "mann-whitney-u two-sided")
    assert_no_nan(r)


def test_improvement_for_lower_metric_is_oriented():
    old = [1.0, 1.01, 0.99, 1.02, 1.0]
    new = [0.9, 0.91, 0.89, 0.9, 0.92]
    r = run(old, new, "step_time_s")
    assert r.change_pct == pytest.approx(-10.0)
    assert r.improvement_pct == pytest.approx(10.0)
    assert r.improvement_ci_low == pytest.approx(-r.change_ci_high)
    assert r.improvement_ci_high == pytest.approx(-r.change_ci_low)
    assert r.verdict == "improved"


def test_n3_is_honestly_inconclusive():
    r = run([100.0, 101.0, 99.0], [90.0, 91.0, 89.0])
    assert r.verdict == "unchanged"
    assert r.indicated == "regressed"
    assert not r.conclusive and not r.significant and r.exceeds_threshold
    assert any("n too small" in x for x in r.reasons)
    assert any("not significant" in x for x in r.reasons)


def test_below_threshold_is_unchanged_even_if_significant():
    old = [100.0, 100.1, 100.2, 100.3, 100.4]
    new = [101.0, 101.1, 101.2, 101.3, 101.4]
    r = run(old, new)
    assert r.significant and not r.exceeds_threshold
    assert r.verdict == "unchanged" and r.indicated == "unchanged"
    r = run(old, new, threshold_pct=0.5)
    assert r.verdict == "improved" and r.threshold_pct == 0.5


def test_edge_cases():
    r = run([], [1.0, 2.0])
    assert r.change_pct is None and r.verdict == "unchanged" and r.indicated is None
    assert_no_nan(r)
    r = run([100.0], [80.0])
    assert r.change_pct == pytest.approx(-20.0) and r.p_value is None and r.verdict == "unchanged"
    assert_no_nan(r)
    r = run([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert r.change_pct == 0.0 and (r.change_ci_low, r.change_ci_high) == (0.0, 0.0) and r.p_value == 1.0
    assert_no_nan(r)


@settings(max_examples=50, deadline=None)
@given(
    old=st.lists(st.floats(0.1, 100.0), min_size=1, max_size=8),
    slow=st.floats(1.0, 3.0),
    metric=st.sampled_from(["step_time_s", "peak_memory_gib", "elapsed_s"]),
)
def test_slower_or_bigger_never_improved(old, slow, metric):
    r = run(old, [x * slow for x in old], metric)
    assert r.verdict != "improved"
    assert r.indicated != "improved"
    assert r.improvement_pct <= 1e-9


@settings(max_examples=50, deadline=None)
@given(
    old=st.lists(st.floats(1.0, 1e4), min_size=2, max_size=6),
    new=st.lists(st.floats(1.0, 1e4), min_size=2, max_size=6),
    k=st.floats(1e-2, 1e2),
    data=st.data(),
)
def test_scale_and_order_invariant(old, new, k, data):
    a = run(old, new)
    b = run(
        data.draw(st.permutations([x * k for x in old])), data.draw(st.permutations([x * k for x in new]))
    )
    assert b.verdict == a.verdict and b.p_value == pytest.approx(a.p_value)
    for f in ("change_pct", "change_ci_low", "change_ci_high"):
        assert getattr(b, f) == pytest.approx(getattr(a, f), rel=1e-6, abs=1e-9)


def test_lookback_numbers():
    hist = [90.0, 100.0, 101.0, 99.0, 100.0, 102.0, 103.0]
    r = lookback(95.0, hist, k=5, metric="throughput_tokens_per_s")
    used = np.array(hist[-5:])
    z = (95.0 - used.mean()) / used.std(ddof=1)
    assert r.n_history == 5 and r.z == pytest.approx(z) and r.oriented_z == pytest.approx(z)
    assert r.history_mean == pytest.approx(used.mean())
    assert r.verdict == "regressed"
    assert lookback(101.5, hist, metric="throughput_tokens_per_s").verdict == "unchanged"
    assert lookback(95.0, hist, metric="throughput_tokens_per_s", z_threshold=10).verdict == "unchanged"


def test_lookback_oriented_for_lower_metrics():
    r = lookback(0.8, [1.0, 1.01, 0.99, 1.0], metric="step_time_s")
    assert r.z < 0 and r.oriented_z > 0 and r.verdict == "improved"


def test_lookback_undefined():
    r = lookback(1.0, [1.0])
    assert r.z is None and r.verdict is None and r.n_history == 1
    r = lookback(1.0, [])
    assert r.z is None and r.history_mean is None
    r = lookback(2.0, [1.0, 1.0, 1.0])
    assert r.z is None and r.verdict is None and "zero spread" in r.reasons[0]
    assert_no_nan(r)


def test_many_release_checks_equal_one_at_a_time():
    from ablate.backend.analysis.regression import ReleasePair, compare_releases_many

    pairs = [
        ReleasePair(OLD, NEW, "throughput_tokens_per_s"),
        ReleasePair(NEW, OLD, "step_time_s"),
        ReleasePair([0.0, 0.0], [1.0, 2.0], "throughput_tokens_per_s"),
        ReleasePair([], [1.0, 2.0], "throughput_tokens_per_s"),
        ReleasePair([5.0], [5.0, 6.0, 7.0], "throughput_tokens_per_s"),
    ]
    batched = compare_releases_many(pairs, n_resamples=N_RESAMPLES, seed=1, threshold_pct=2.0)
    for p, got in zip(pairs, batched, strict=True):
        assert got == run(p.baseline, p.contender, p.metric, seed=1, threshold_pct=2.0)
