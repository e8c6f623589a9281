"""common_shift: whether every rung of a workload moved alike, release over release."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.backend.analysis.environment import common_shift
from ablate.backend.analysis.regression import ReleasePair

M = "throughput_tokens_per_s"


def _pairs(factors: list[float], seed: int = 0, cv: float = 0.01, n: int = 5) -> list[ReleasePair]:
    rng = np.random.default_rng(seed)
    return [
        ReleasePair(
            100 * np.exp(cv * rng.standard_normal(n)), 100 * f * np.exp(cv * rng.standard_normal(n)), M
        )
        for f in factors
    ]


def test_every_rung_by_one_factor_is_alike() -> None:
    s = common_shift(_pairs([0.6, 0.6, 0.6, 0.6]))
    assert s.alike and s.n_rungs == 4 and s.heterogeneity_p is not None and s.heterogeneity_p >= 0.05
    assert s.improvement_pct == pytest.approx(-40, abs=1.5) and "every rung moved alike" in s.reason


@pytest.mark.parametrize(
    ("factors", "why"),
    [
        ([1.0, 1.0, 0.8], "did not all move past the threshold"),
        ([0.9, 0.8, 0.7], "moved by different factors"),
        ([0.6, 1.4], "did not all move past the threshold"),
        ([0.6], "nothing to move alike"),
    ],
)
def test_rungs_that_moved_differently_are_not_alike(factors: list[float], why: str) -> None:
    s = common_shift(_pairs(factors))
    assert not s.alike and why in s.reason


def test_a_change_within_the_noise_is_not_alike() -> None:
    # -4% at CV 10% with 3 repeats: past the threshold, within the noise.
    s = common_shift(_pairs([0.96, 0.96], cv=0.10, n=3, seed=3))
    assert not s.alike


def test_lower_is_better_is_oriented_and_metrics_must_agree() -> None:
    s = common_shift([ReleasePair(p.baseline, p.contender, "step_time_s") for p in _pairs([1.3, 1.3, 1.3])])
    assert s.alike and s.improvement_pct is not None and s.improvement_pct < -25
    with pytest.raises(ValueError, match="one metric"):
        common_shift([ReleasePair([1, 2], [1, 2], M), ReleasePair([1, 2], [1, 2], "step_time_s")])


def test_an_untestable_rung_stops_the_judgement() -> None:
    pairs = _pairs([0.6, 0.6])
    s = common_shift([*pairs, ReleasePair([100.0], [60.0], M)])
    assert not s.alike and s.reason == "a rung is not testable"
