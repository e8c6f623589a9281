"""The moderated t: each side's variance shrunk toward the one the release's cells share."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.backend.analysis.moderated import MIN_SIDES, Prior, cell_floor, prior_variance, squeeze
from ablate.backend.analysis.regression import ReleasePair, compare_releases_many
from ablate.backend.analysis.stats import MODERATED_LOG_TEST, WELCH_LOG_TEST

M = "throughput_tokens_per_s"


def test_the_prior_of_sides_sharing_one_noise_level_is_that_level_with_a_large_weight() -> None:
    rng = np.random.default_rng(0)
    # 400 sides of 3 values (2 df) at sigma 0.02: sample variances sigma^2 chi2_2 / 2.
    sides = [(0.02**2 * float(rng.chisquare(2)) / 2, 2) for _ in range(400)]
    prior = prior_variance(sides)
    # The weight is estimated from the excess spread of log variances: noisy at 2 df, still large.
    assert prior is not None and prior.df > 10
    assert math.sqrt(prior.s0_sq) == pytest.approx(0.02, rel=0.1)


def test_unequal_levels_give_a_small_weight_and_too_few_sides_none() -> None:
    rng = np.random.default_rng(1)
    sides = [(s**2 * float(rng.chisquare(4)) / 4, 4) for s in np.exp(rng.normal(np.log(0.02), 1.0, 400))]
    prior = prior_variance(sides)
    assert prior is not None and prior.df < 5
    assert prior_variance(sides[: MIN_SIDES - 1]) is None
    assert prior_variance([(0.0, 2)] * 20) is None  # no spread anywhere (deterministic): nothing to share


def test_squeeze_pulls_toward_the_prior_but_never_below_the_cells_own_floor() -> None:
    prior = Prior(s0_sq=1e-4, df=20.0, n_sides=40)
    v, df = squeeze(0.5e-4, 2.0, prior)
    assert v == pytest.approx((20 * 1e-4 + 2 * 0.5e-4) / 22) and df == 22.0
    # A cell 25x the prior on both sides (4 df): the floor is its own variance times 1 + (2/4)^2,
    # on the prior's df (the t keeps its light tails; the interval is as wide as the cell asks).
    floor = cell_floor([(25e-4, 2.0), (25e-4, 2.0)])
    assert floor == pytest.approx(1.25 * 25e-4)
    assert squeeze(25e-4, 2.0, prior, floor) == (floor, 22.0)
    # An ordinary cell's floor lies below the shrunk variance: the prior decides.
    low = cell_floor([(0.5e-4, 2.0), (1e-4, 2.0)])
    assert squeeze(0.5e-4, 2.0, prior, low) == squeeze(0.5e-4, 2.0, prior)
    assert squeeze(3e-4, 2.0, None, floor) == (3e-4, 2.0)
    assert cell_floor([(1e-4, 0.0)]) == 0.0


def test_a_noisier_kind_of_cell_keeps_its_coverage_and_a_drop_is_found() -> None:
    """Seeded: pools of 20 cells with CVs 1.5/2/3% (n = 3) and one 10% drop at CV 2%; the floor keeps
    the 3% cells' 95% intervals covering (the full shrinkage covered them 86%) and finds the drop."""
    rng = np.random.default_rng(7)
    cvs = [(0.015, 0.02, 0.03)[i % 3] for i in range(19)] + [0.02]
    covered = noisy = found = 0
    for _ in range(150):
        pairs = [
            ReleasePair(
                100 * np.exp(math.sqrt(math.log1p(cv * cv)) * rng.standard_normal(3)),
                (90 if i == 19 else 100) * np.exp(math.sqrt(math.log1p(cv * cv)) * rng.standard_normal(3)),
                M,
            )
            for i, cv in enumerate(cvs)
        ]
        res = compare_releases_many(pairs, moderate=True)
        for cv, r in zip(cvs[:19], res[:19], strict=True):
            if cv == 0.03:
                noisy += 1
                covered += r.change_ci_low is not None and r.change_ci_low <= 0 <= (r.change_ci_high or 0)
        found += res[19].verdict == "regressed"
    assert covered / noisy > 0.9 and found / 150 > 0.85


def test_compare_releases_many_moderates_per_metric_and_pool() -> None:
    rng = np.random.default_rng(2)
    pairs = [
        ReleasePair(
            100 * np.exp(0.02 * rng.standard_normal(3)), 100 * np.exp(0.02 * rng.standard_normal(3)), M
        )
        for _ in range(19)
    ]
    drop = ReleasePair(
        100 * np.exp(0.02 * rng.standard_normal(3)), 90 * np.exp(0.02 * rng.standard_normal(3)), M
    )
    plain = compare_releases_many([*pairs, drop])
    mod = compare_releases_many([*pairs, drop], moderate=True)
    assert plain[-1].test == WELCH_LOG_TEST and mod[-1].test == MODERATED_LOG_TEST
    assert mod[-1].verdict == "regressed" and mod[-1].p_value is not None and plain[-1].p_value is not None
    assert mod[-1].p_value < plain[-1].p_value
    # Each pool alone has too few sides: no prior, plain Welch.
    alone = compare_releases_many(
        [ReleasePair(p.baseline, p.contender, M, pool=str(i)) for i, p in enumerate(pairs)], moderate=True
    )
    assert all(r.test == WELCH_LOG_TEST for r in alone)
