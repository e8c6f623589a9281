import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from ablate.backend.analysis.regression import (
    LookbackRequest,
    LookbackRule,
    ReleasePair,
    compare_releases,
    compare_releases_many,
    lookback,
    lookback_many,
    trend_many,
)
from ablate.backend.analysis.stats import BH_METHOD, bh_adjust

from .helpers import assert_no_nan


def run(b, c, metric="throughput_tokens_per_s", **kw):
    return compare_releases(b, c, metric, **kw)


def gm(x):
    return math.exp(np.log(np.asarray(x, dtype=float)).mean())


OLD = [1000.0, 1010.0, 995.0, 1004.0, 998.0]
NEW = [940.0, 951.0, 936.0, 944.0, 948.0]


def test_regression_numbers_recomputed():
    r = run(OLD, NEW)
    change = (gm(NEW) / gm(OLD) - 1) * 100
    ref = stats.ttest_ind(np.log(NEW), np.log(OLD), equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert r.change_pct == pytest.approx(change)
    assert r.improvement_pct == pytest.approx(change)
    assert (r.change_ci_low, r.change_ci_high) == pytest.approx(
        (math.expm1(ci.low) * 100, math.expm1(ci.high) * 100)
    )
    assert r.p_value == pytest.approx(ref.pvalue) and r.q_value == r.p_value
    assert (r.baseline_median, r.contender_median) == (np.median(OLD), np.median(NEW))
    assert r.verdict == "regressed" and r.indicated == "regressed"
    assert r.significant and r.exceeds_threshold and r.testable
    assert (r.threshold_pct, r.alpha, r.test) == (3.0, 0.05, "welch-t on log values, two-sided")
    assert r.adjustment == "none"
    assert_no_nan(r)


def test_improvement_for_lower_metric_is_oriented():
    old = [1.0, 1.01, 0.99, 1.02, 1.0]
    new = [0.9, 0.91, 0.89, 0.9, 0.92]
    r = run(old, new, "step_time_s")
    assert r.change_pct == pytest.approx((gm(new) / gm(old) - 1) * 100)
    assert r.improvement_pct == pytest.approx(-r.change_pct)
    assert r.improvement_ci_low == pytest.approx(-r.change_ci_high)
    assert r.improvement_ci_high == pytest.approx(-r.change_ci_low)
    assert r.verdict == "improved"


def test_n3_detects_a_20pct_drop():
    # Mann-Whitney's floor (p >= 0.1 at 3 vs 3) used to make this "unchanged".
    r = run([100.0, 101.0, 99.0], [80.0, 81.0, 79.0])
    assert r.verdict == "regressed" and r.testable and r.p_value < 0.001


def test_past_the_threshold_within_the_noise_is_unchanged_not_suspect():
    r = run([100.0, 110.0, 90.0], [94.0, 104.0, 85.0])
    assert r.verdict == "unchanged" and r.indicated == "regressed" and not r.suspect
    assert r.exceeds_threshold and not r.significant
    assert any("within the noise (p=" in x for x in r.reasons)


def test_suspect_is_past_the_threshold_with_p_below_alpha_but_q_not():
    """Suspect = p < alpha, q >= alpha, past the threshold; the other comparison dilutes q."""
    pairs = [
        ReleasePair([950.0, 1000.0, 1050.0], [830.0, 880.0, 930.0], "throughput_tokens_per_s"),
        ReleasePair([1000.0, 1001.0, 1002.0], [1000.0, 1001.0, 1002.0], "throughput_tokens_per_s"),
    ]
    r = compare_releases_many(pairs)[0]
    assert r.p_value is not None and r.q_value is not None and r.p_value < 0.05 <= r.q_value
    assert r.verdict == "unchanged" and r.suspect and r.indicated == "regressed"
    assert r.reasons[0].startswith("suspect: regressed by 12.02% (p=0.0")
    alone = compare_releases_many(pairs[:1], adjust=False)[0]  # q = p: confirmed, not suspect
    assert alone.verdict == "regressed" and not alone.suspect


def test_below_threshold_is_unchanged_even_if_significant():
    old = [100.0, 100.1, 100.2, 100.3, 100.4]
    new = [101.0, 101.1, 101.2, 101.3, 101.4]
    r = run(old, new)
    assert r.significant and not r.exceeds_threshold
    assert r.verdict == "unchanged" and r.indicated == "unchanged"
    r = run(old, new, threshold_pct=0.5)
    assert r.verdict == "improved" and r.threshold_pct == 0.5


def test_not_testable_is_never_unchanged():
    r = run([100.0], [80.0])
    assert r.verdict == "not testable" and not r.testable
    assert r.change_pct == pytest.approx(-20.0) and r.p_value is None and r.q_value is None
    assert "not testable (n=1 vs 1): a test needs 2 values a side" in r.reasons
    assert_no_nan(r)
    r = run([100.0, 101.0, 99.0], [101.0])
    assert r.verdict == "not testable" and r.indicated == "unchanged"


def test_edge_cases():
    r = run([], [1.0, 2.0])
    assert r.change_pct is None and r.verdict == "not testable" and r.indicated is None
    assert_no_nan(r)
    r = run([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert r.change_pct == 0.0 and (r.change_ci_low, r.change_ci_high) == (0.0, 0.0) and r.p_value == 1.0
    assert r.verdict == "unchanged"
    r = run([0.0, 1.0], [1.0, 2.0])
    assert r.verdict == "not testable" and any("non-positive" in x for x in r.reasons)
    assert_no_nan(r)


def test_two_values_a_side_say_what_they_assume():
    r = run([100.0, 101.0], [90.0, 91.0, 90.5])
    assert r.test.startswith("welch-t on log values, df at most 1.25")
    assert any("a side has 2 values" in x and "1.25 degrees of freedom" in x for x in r.reasons)


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


def _spread_ok(values: list[float]) -> bool:
    """All equal, or a spread well above float rounding (scaling moves values by an ulp or so)."""
    lo, hi = min(values), max(values)
    return lo == hi or hi / lo - 1.0 > 1e-6


def _assert_same_result(a, b, p_abs: float) -> None:
    assert b.verdict == a.verdict and b.p_value == pytest.approx(a.p_value, abs=p_abs)
    for f in ("change_pct", "change_ci_low", "change_ci_high"):
        assert getattr(b, f) == pytest.approx(getattr(a, f), rel=1e-6, abs=1e-9)


def _scaled_run(old, new, k, data):
    """The check of both sides times k, each side in a drawn order (as given where data is None)."""
    old, new = [x * k for x in old], [x * k for x in new]
    if data is not None:
        old, new = data.draw(st.permutations(old)), data.draw(st.permutations(new))
    return run(old, new)


sides = st.lists(st.floats(1.0, 1e4), min_size=2, max_size=6)


@settings(max_examples=50, deadline=None)
@given(old=sides, new=sides, j=st.integers(-7, 7), data=st.data())
@example(old=[1.0, 1.0], new=[1.0, 1.0000000000000002], j=-2, data=None).via("found under load in CI")
def test_scale_by_a_power_of_two_and_order_change_nothing(old, new, j, data):
    # A power of two scales exactly, so even spreads of one ulp must give the same test.
    k = 2.0**j
    _assert_same_result(run(old, new), _scaled_run(old, new, k, data), p_abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(old=sides, new=sides, k=st.floats(1e-2, 1e2), data=st.data())
@example(old=[1.0, 1.0], new=[1.0, 1.0000000000000002], k=0.3, data=None).via("rounding-level spread")
def test_scale_and_order_invariant(old, new, k, data):
    a, b = run(old, new), _scaled_run(old, new, k, data)
    # Any other factor rounds each value by up to an ulp: the p-value of a spread at that level is
    # rounding over rounding, so it is held to the digits the data carry (below 1e-12: counts as 0).
    well_posed = _spread_ok(old) and _spread_ok(new)
    _assert_same_result(a, b, p_abs=1e-9 if well_posed else 1.0)


def test_spreads_at_float_rounding_are_no_spread():
    # One ulp apart is not a measured difference: p is 1, as for equal values, at any scale.
    for k in (1.0, 0.25, 0.3, 7.0, 1e-200, 1e200):
        r = run([k, k], [k, k * (1 + 2.2e-16)])
        assert r.p_value == 1.0 and r.verdict == "unchanged", k
    r = run([1.0, 1.0], [1.0 + 1e-9, 1.0 + 1e-9])  # a real difference without noise stays exact
    assert r.p_value == 0.0


def test_many_release_checks_are_one_bh_family():
    pairs = [
        ReleasePair(OLD, NEW, "throughput_tokens_per_s"),
        ReleasePair(NEW, OLD, "step_time_s"),
        ReleasePair([0.0, 0.0], [1.0, 2.0], "throughput_tokens_per_s"),
        ReleasePair([], [1.0, 2.0], "throughput_tokens_per_s"),
        ReleasePair([5.0], [5.0, 6.0, 7.0], "throughput_tokens_per_s"),
        ReleasePair([100.0, 110.0, 90.0], [97.0, 107.0, 88.0], "throughput_tokens_per_s"),
    ]
    batched = compare_releases_many(pairs, threshold_pct=2.0)
    single = [run(p.baseline, p.contender, p.metric, threshold_pct=2.0) for p in pairs]
    for got, one in zip(batched, single, strict=True):
        assert (got.change_pct, got.change_ci_low, got.change_ci_high, got.p_value) == (
            one.change_pct,
            one.change_ci_low,
            one.change_ci_high,
            one.p_value,
        )
        assert got.adjustment == BH_METHOD
    assert [g.q_value for g in batched] == bh_adjust([s.p_value for s in single])
    assert [g.verdict for g in batched[2:5]] == ["not testable"] * 3


def test_bh_keeps_a_real_regression_among_many_unchanged_cells():
    rng = np.random.default_rng(11)

    def draw():
        return 100 * (1 + 0.02 * rng.standard_normal(5))

    pairs = [ReleasePair(draw(), draw(), "mfu") for _ in range(50)]
    pairs.append(ReleasePair(OLD, NEW, "throughput_tokens_per_s"))
    res = compare_releases_many(pairs)
    assert res[-1].verdict == "regressed" and res[-1].q_value >= res[-1].p_value
    assert all(r.verdict in ("unchanged", "improved", "regressed") for r in res)


# Lookback --------------------------------------------------------------------------------------


def test_lookback_numbers():
    hist = [90.0, 100.0, 101.0, 99.0, 100.0, 102.0, 103.0]
    r = lookback(95.0, hist, k=5, metric="throughput_tokens_per_s")
    used = np.array(hist[-5:])
    t = (95.0 - used.mean()) / (used.std(ddof=1) * math.sqrt(1 + 1 / 5))
    assert r.n_history == 5 and r.t == pytest.approx(t) and r.oriented_t == pytest.approx(t)
    assert r.p_value == pytest.approx(2 * stats.t.sf(abs(t), 4))
    assert r.critical == pytest.approx(stats.t.ppf(0.975, 4))
    assert r.history_mean == pytest.approx(used.mean())
    assert r.change_pct == pytest.approx((95.0 / used.mean() - 1) * 100)
    assert r.verdict == "regressed"
    assert lookback(101.5, hist, metric="throughput_tokens_per_s").verdict == "unchanged"
    # Past the threshold but inside the prediction interval: unchanged, with a reason.
    wide = lookback(95.0, [90.0, 110.0, 100.0, 95.0, 105.0], metric="throughput_tokens_per_s")
    assert wide.verdict == "unchanged" and "prediction interval" in wide.reasons[0]


def test_lookback_needs_the_minimum_effect():
    hist = [100.0, 100.01, 99.99, 100.0, 100.02]
    r = lookback(100.5, hist, metric="peak_memory_gib")  # +0.5%: far outside the spread, but small
    assert r.p_value < 0.001 and r.verdict == "unchanged"
    assert (
        lookback(100.5, hist, metric="peak_memory_gib", rule=LookbackRule(threshold_pct=0.3)).verdict
        == "regressed"
    )


def test_lookback_oriented_for_lower_metrics():
    r = lookback(0.8, [1.0, 1.01, 0.99, 1.0], metric="step_time_s")
    assert r.t < 0 and r.oriented_t > 0 and r.verdict == "improved"


def test_lookback_needs_min_history():
    r = lookback(50.0, [100.0, 101.0, 99.0], metric="throughput_tokens_per_s")
    assert r.verdict is None and r.t is None and r.n_history == 3
    assert r.reasons == ("3 history releases: the lookback needs 4",)
    assert lookback(50.0, [100.0, 101.0, 99.0], rule=LookbackRule(min_history=3)).verdict == "regressed"
    r = lookback(1.0, [])
    assert r.t is None and r.history_mean is None and r.verdict is None
    assert_no_nan(r)


def test_lookback_zero_spread_history():
    r = lookback(2.0, [1.0, 1.0, 1.0, 1.0])
    assert r.verdict == "improved" and r.p_value == 0.0 and r.t is None
    assert lookback(1.0, [1.0, 1.0, 1.0, 1.0]).verdict == "unchanged"
    assert_no_nan(r)


def test_lookback_many_is_one_bh_family():
    reqs = [
        LookbackRequest(95.0, [100.0, 101.0, 99.0, 100.0, 102.0], "throughput_tokens_per_s"),
        LookbackRequest(100.5, [100.0, 101.0, 99.0, 100.0, 102.0], "throughput_tokens_per_s"),
        LookbackRequest(100.5, [100.0, 101.0], "throughput_tokens_per_s"),
    ]
    many = lookback_many(reqs)
    single = [lookback(r.new_median, r.history_medians, metric=r.metric) for r in reqs]
    assert [m.p_value for m in many] == [s.p_value for s in single]
    assert [m.q_value for m in many] == bh_adjust([s.p_value for s in single])
    assert many[2].p_value is None and many[2].verdict is None


def test_lookback_note_follows_its_own_test():
    """Rejected by its own test (p < alpha) but not by q: never "within its prediction interval"."""
    hist = [100.0, 101.0, 99.0, 100.5, 99.5]
    out = lookback_many(
        [
            LookbackRequest(96.0, hist, "throughput_tokens_per_s"),  # t ~ -4.4, p ~ 0.01
            *(LookbackRequest(100.0 + i * 0.1, hist, "throughput_tokens_per_s") for i in range(5)),
        ]
    )
    r = out[0]
    assert r.p_value is not None and r.q_value is not None and r.p_value < 0.05 <= r.q_value
    assert r.verdict == "unchanged" and "outside its prediction interval" in r.reasons[0]
    assert "within" not in r.reasons[0]


def test_a_steady_drift_is_caught_by_the_trend_not_by_the_lookback():
    """-1.5% per release without noise: the lookback reads t = -1.7 (its history spreads with the drift)."""
    hist = [100.0 * 0.985**i for i in range(5)]
    new = 100.0 * 0.985**5
    assert lookback(new, hist, metric="throughput_tokens_per_s").verdict == "unchanged"
    (tr,) = trend_many([LookbackRequest(new, hist, "throughput_tokens_per_s")], adjust=False)
    assert tr.verdict == "regressed" and tr.n_releases == 6 and tr.p_value == 0.0
    assert tr.slope_pct == pytest.approx(-1.5) and tr.change_pct == pytest.approx((0.985**5 - 1) * 100)
    assert tr.reasons == ("drift: -1.50% per release over 6 releases",)
    # Lower is better: the same slope on step time is an improvement.
    (st,) = trend_many([LookbackRequest(new, hist, "step_time_s")], adjust=False)
    assert st.verdict == "improved" and st.improvement_pct == pytest.approx(-st.change_pct)


def test_the_trend_needs_history_and_a_slope_past_the_threshold():
    short = trend_many([LookbackRequest(95.0, [100.0, 99.0, 98.0], "throughput_tokens_per_s")], adjust=False)[
        0
    ]
    assert short.verdict is None and short.p_value is None and "the trend needs 5" in short.reasons[0]
    flat = trend_many(
        [LookbackRequest(100.2, [100.0, 100.5, 99.5, 100.1, 99.9], "throughput_tokens_per_s")], adjust=False
    )[0]
    assert flat.verdict == "unchanged" and flat.p_value is not None and flat.p_value > 0.05
