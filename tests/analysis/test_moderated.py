"""The moderated t: each side's variance shrunk toward the one the release's cells share."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.backend.analysis.moderated import MIN_SIDES, Prior, prior_variance, squeeze
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


def test_squeeze_pulls_toward_the_prior_but_a_noisier_side_keeps_its_own() -> None:
    prior = Prior(s0_sq=1e-4, df=20.0, n_sides=40)
    v, df = squeeze(0.5e-4, 2.0, prior)
    assert v == pytest.approx((20 * 1e-4 + 2 * 0.5e-4) / 22) and df == 22.0
    # 25x the prior on 2 df: F far in the tail, its own variance and df.
    assert stats.f.sf(25.0, 2, 20) < 0.2 and squeeze(25e-4, 2.0, prior) == (25e-4, 2.0)
    assert squeeze(3e-4, 2.0, None) == (3e-4, 2.0)


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
