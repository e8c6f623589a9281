"""The group-sequential design of adaptive repeats: spending, verdicts, and its errors by simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from ablate.backend.analysis.moderated import GUARD_P, MIN_SIDES, prior_variance, squeeze
from ablate.backend.analysis.sequential import (
    IMPROVED,
    INCONCLUSIVE,
    REGRESSED,
    UNCHANGED,
    SequentialDesign,
    look,
    release_prior,
    simulate,
    simulate_release,
    squeezed,
    study_prior,
)


def test_spending_never_exceeds_the_totals_and_skipped_looks_lose_their_share() -> None:
    d = SequentialDesign(min_n=3, max_n=10)
    levels = [d.levels(n) for n in range(3, 11)]
    assert all(a > 0 and b > 0 for a, b in levels)
    assert sum(a for a, _ in levels) == pytest.approx(d.alpha)
    assert sum(b for _, b in levels) == pytest.approx(d.beta)
    assert d.levels(2) == (0.0, 0.0) and d.levels(11) == (0.0, 0.0)
    # beta (rho 0.5) spends early: each look gets less than the one before
    assert all(x[1] > y[1] for x, y in itertools.pairwise(levels))


def test_alpha_boundaries_at_known_values() -> None:
    """alpha 0.04 spent as 0.04 * (n / 10) ** 1.5: the first look holds the shares of n = 1..3,
    then each look a little more than the one before (a late look is cheap at low noise)."""
    d = SequentialDesign(min_n=3, max_n=10)
    alphas = [d.levels(n)[0] for n in range(3, 11)]
    assert alphas[0] == pytest.approx(0.006573, abs=1e-6)
    assert alphas[1] == pytest.approx(0.003547, abs=1e-6)
    assert alphas[-1] == pytest.approx(0.005847, abs=1e-6)
    assert all(x < y for x, y in itertools.pairwise(alphas[1:]))
    # the first look's two-sided boundary: 5.19 on a comparison's own 4 df, 2.72 with a pool's prior
    assert float(special.stdtrit(4, 1 - alphas[0] / 2)) == pytest.approx(5.187, abs=1e-3)
    assert float(special.stdtrit(4 + 1e4, 1 - alphas[0] / 2)) == pytest.approx(2.718, abs=1e-3)
    # without a prior: alpha 0.05 spent with rho 1.25, whose first look's boundary is 4.47 at 4 df
    alone = d.alone().levels(3)[0]
    assert alone == pytest.approx(0.011101, abs=1e-6)
    assert float(special.stdtrit(4, 1 - alone / 2)) == pytest.approx(4.467, abs=1e-3)


def test_a_look_at_3_runs_with_t_below_the_boundary_runs_on_and_one_more_run_decides() -> None:
    d = SequentialDesign(min_n=3, max_n=10).alone()  # no prior: alpha 0.05 spent with rho 1.25
    base, faster = [1000.0, 1014.0, 986.0], [1040.0, 1025.0, 1055.0]  # +4.0%, t = 3.38 at 4 df
    got = look(d, faster, base, "higher")
    assert got.verdict is None and got.n == 3 and got.change_pct == pytest.approx(4.0, abs=0.01)
    # the old design (alpha 0.15 spent early) called this improved at 3 runs
    assert (
        look(SequentialDesign(3, 10, alpha=0.15, alpha_rho=0.5), faster, base, "higher").verdict == IMPROVED
    )
    assert look(d, [*faster, 1041.0], [*base, 1001.0], "higher").verdict == IMPROVED


def test_a_pool_prior_decides_at_3_runs_what_the_comparison_alone_cannot() -> None:
    """The same +4.0% at 3 runs: with its workload's prior (noise 1.4%, from many sides) the
    boundary is 2.7 instead of 5.2, and t = 3.4 decides; a prior far noisier than the comparison
    does not make it noisier than its own (the prior's weight is the pool's, the guard one-sided)."""
    d = SequentialDesign(min_n=3, max_n=10)
    base, faster = [1000.0, 1014.0, 986.0], [1040.0, 1025.0, 1055.0]
    quiet = (math.log1p(0.014**2), 1e4)
    assert look(d, faster, base, "higher", prior=quiet).verdict == IMPROVED
    noisy = (math.log1p(0.05**2), 1e4)
    assert look(d, faster, base, "higher", prior=noisy).verdict is None


def test_the_vectorised_prior_and_squeeze_are_the_moderated_t() -> None:
    """release_prior / squeezed (what the simulation and the service run) agree with
    moderated.prior_variance / squeeze, on a pool of equal noise and on one of unequal noise."""
    rng = np.random.default_rng(5)
    for spread in (0.0, 0.5, 1.5):
        v = np.exp(rng.normal(0.0, spread, 20)) * rng.chisquare(2, 20) / 2 * 4e-4
        ref = prior_variance([(float(x), 2) for x in v])
        assert ref is not None
        s0_sq, d0 = release_prior(v, 2.0)
        assert float(s0_sq) == pytest.approx(ref.s0_sq, rel=1e-9)
        assert float(d0) == pytest.approx(ref.df, rel=1e-6)
        got_var, got_df = squeezed(v, 4.0, (s0_sq, d0))
        for x, gv, gd in zip(v, got_var, got_df, strict=True):
            # The adaptive design's guard (the release verdict floors instead): a variance above the
            # prior's at a one-sided F tail below GUARD_P keeps its own.
            guarded = x > ref.s0_sq and stats.f.sf(x / ref.s0_sq, 4.0, ref.df) < GUARD_P
            want = (float(x), 4.0) if guarded else squeeze(float(x), 4.0, ref)
            assert (float(gv), float(gd)) == pytest.approx(want, rel=1e-6)
    assert float(release_prior(np.ones(MIN_SIDES - 1), 2.0)[1]) == 0.0  # too few sides: no prior


def test_the_study_prior_is_fixed_by_every_sides_first_min_runs() -> None:
    """Runs after the first ``min`` do not move the prior (no stopping can select what it is made
    of); sides short of ``min`` runs are left out, and too few sides give none."""
    rng = np.random.default_rng(7)
    sides = [list(1000 * np.exp(rng.normal(0, 0.02, 3))) for _ in range(MIN_SIDES)]
    first = study_prior(sides, 3)
    assert first is not None and 0.01 < math.sqrt(first[0]) < 0.04
    later = [[*s, 5000.0, 10.0] for s in sides]  # wild later runs
    assert study_prior([*later, [1000.0, 1001.0]], 3) == first
    assert study_prior(sides[:-1], 3) is None


def test_bad_designs_are_refused() -> None:
    with pytest.raises(ValueError, match="min"):
        SequentialDesign(min_n=5, max_n=3)
    with pytest.raises(ValueError, match="alpha"):
        SequentialDesign(min_n=3, max_n=5, alpha=1.5)
    with pytest.raises(ValueError, match="alpha_rho"):
        SequentialDesign(min_n=3, max_n=5, alpha_rho=0.0)
    with pytest.raises(ValueError, match="guard_p"):
        SequentialDesign(min_n=3, max_n=5, guard_p=1.0)


def test_the_guard_level_decides_which_comparisons_keep_their_own_variance() -> None:
    """A variance twice the prior's on 4 df: kept at the default guard (0.2, as the release
    verdict), moderated at a looser one and with none; the design passes its level to the look."""
    prior = (np.asarray(1e-4), np.asarray(1e4))
    var = np.asarray([1e-4, 2.2e-4])
    own_var, own_df = squeezed(var, 4.0, prior)
    assert own_var[1] == pytest.approx(2.2e-4) and own_df[1] == 4.0 and own_df[0] > 1e4
    for g in (0.05, 0.0):
        got_var, got_df = squeezed(var, 4.0, prior, g)
        assert got_df[1] > 1e4 and got_var[1] == pytest.approx((1e4 * 1e-4 + 4 * 2.2e-4) / (1e4 + 4))
    base, faster = [1000.0, 1030.0, 975.0], [1045.0, 1010.0, 1080.0]
    quiet = (math.log1p(0.012**2), 1e4)
    assert look(SequentialDesign(3, 10), faster, base, "higher", prior=quiet).verdict is None
    assert look(SequentialDesign(3, 10, guard_p=0.0), faster, base, "higher", prior=quiet).verdict == IMPROVED


def test_a_large_change_is_decided_at_the_first_look_in_its_direction() -> None:
    d = SequentialDesign(min_n=3, max_n=8)
    base = [1000.0, 1004.0, 997.0]
    faster = [1300.0, 1296.0, 1305.0]
    got = look(d, faster, base, "higher")
    assert got.verdict == IMPROVED and got.n == 3 and got.change_pct == pytest.approx(30, abs=1)
    assert look(d, faster, base, "lower").verdict == REGRESSED  # a time metric: higher is worse
    same = look(d, [1001.0, 999.0, 1003.0], base, "higher")
    assert same.verdict == UNCHANGED


def test_too_few_runs_decide_nothing_and_noise_at_max_is_inconclusive_with_a_detectable_change() -> None:
    d = SequentialDesign(min_n=3, max_n=4)
    assert look(d, [1000.0, 1010.0], [1000.0, 990.0], "higher").verdict is None
    noisy = look(d, [1000.0, 1200.0, 900.0, 1100.0], [1050.0, 880.0, 1150.0, 990.0], "higher")
    assert noisy.verdict == INCONCLUSIVE and noisy.n == 4
    assert noisy.detectable_pct is not None and noisy.detectable_pct > 10


def test_simulation_holds_the_error_goals_at_cv_2_percent() -> None:
    """Power >= 90% and false verdicts <= 1.5% for a 5% change, and <= 1.5% false changes where
    nothing changed (issue 28), in pools of 10 comparisons; 10,000 trials, seeded (the
    100,000-trial table: docs/statistics.md). Runs per side: 4.3, above the issue's 4, below the
    4.9 of each comparison on its own variance."""
    d = SequentialDesign(min_n=3, max_n=10)
    codes, runs = simulate(d, 0.02, -0.05, 10000, np.random.default_rng(28), cells=10)
    assert (codes == -1).mean() >= 0.90
    assert ((codes == 1) | (codes == 2)).mean() <= 0.015
    assert runs.mean() <= 4.5
    _, alone = simulate(d, 0.02, -0.05, 10000, np.random.default_rng(28))
    assert runs.mean() < alone.mean() - 0.4
    codes0, _ = simulate(d, 0.02, 0.0, 10000, np.random.default_rng(29), cells=10)
    assert (np.abs(codes0) == 1).mean() <= 0.015


def test_false_changes_stay_under_alpha_where_the_threshold_does_not_help() -> None:
    """At CV 10% the 3% threshold filters almost nothing: the union bound alone keeps false changes
    over all looks under alpha: 5% for a comparison alone, 4% in pools (alpha 0.15 spent early made
    10.7% here)."""
    d = SequentialDesign(min_n=3, max_n=10)
    assert (d.alone().alpha, d.alpha) == (0.05, 0.04)
    codes, _ = simulate(d, 0.10, 0.0, 4000, np.random.default_rng(30))
    assert (np.abs(codes) == 1).mean() <= d.alone().alpha
    codes, _ = simulate(d, 0.10, 0.0, 10000, np.random.default_rng(31), cells=10)
    assert (np.abs(codes) == 1).mean() <= d.alpha


def test_a_mixed_pool_stays_under_alpha_on_average_not_per_cell() -> None:
    """A pool whose cells run at CV 1.5, 2 and 3%: the prior is calibrated on average over the
    pool's cells (under alpha), not per cell: the CV 3% cells make about twice the false changes
    they make on their own variance, near alpha (4.4%, docs/statistics.md), under 5%."""
    d = SequentialDesign(min_n=3, max_n=10)
    pool = [(0.015, 0.02, 0.03)[i % 3] for i in range(10)]
    codes, _ = simulate_release(d, pool, 0.0, 2000, np.random.default_rng(32))
    assert (np.abs(codes) == 1).mean() <= d.alpha
    noisy = [i for i, cv in enumerate(pool) if cv == 0.03]
    pooled_noisy = (np.abs(codes[:, noisy]) == 1).mean()
    alone, _ = simulate_release(d, pool, 0.0, 2000, np.random.default_rng(32), pool=False)  # alpha 0.05
    assert (np.abs(alone[:, noisy]) == 1).mean() < pooled_noisy <= 0.05
