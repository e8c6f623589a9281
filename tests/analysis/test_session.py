"""The between-session variance component: its estimate, and what it does to a release's verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.backend.analysis.regression import ReleasePair, compare_releases_many
from ablate.backend.analysis.session import MIN_DIFFERENCES, RERUN_METHOD, rerun_variances, session_variance

MU = 100.0
TPUT = "throughput_tokens_per_s"


def _release(
    rng: np.random.Generator, cells: int, n: int, level: float, mult: np.ndarray | None = None
) -> list[np.ndarray]:
    """One release's session: each cell shifted by its own session effect, CV 2% within."""
    shift = np.exp(level * rng.standard_normal(cells))
    mult = np.ones(cells) if mult is None else mult
    return [MU * m * s * np.exp(0.02 * rng.standard_normal(n)) for m, s in zip(mult, shift, strict=True)]


def test_the_estimate_recovers_the_session_level() -> None:
    rng = np.random.default_rng(27)
    history = [_release(rng, 40, 5, 0.02) for _ in range(6)]
    sv = session_variance([[h[i] for h in history] for i in range(40)])
    assert sv.n_differences == 200 and sv.n_cells == 40
    assert sv.tau is not None and 0.016 <= sv.tau <= 0.024
    quiet = [_release(rng, 40, 5, 0.0) for _ in range(6)]
    assert (session_variance([[h[i] for h in quiet] for i in range(40)]).tau or 0.0) < 0.005


def test_reruns_of_the_same_images_leave_out_what_changed_between_releases() -> None:
    """Cells that also move 3% a release for real: successive releases read that as session noise,
    pairs of sessions of the same images (a release and its rerun) do not."""
    rng = np.random.default_rng(32)
    moves = np.exp(np.cumsum(0.03 * rng.standard_normal((6, 40)), axis=0))
    history = [_release(rng, 40, 5, 0.01, moves[j]) for j in range(6)]
    rerun = _release(rng, 40, 5, 0.01, moves[-1])
    chain = session_variance([[h[i] for h in history] for i in range(40)])
    pairs = rerun_variances({"c": [(history[-1][i], rerun[i]) for i in range(40)]})["c"]
    assert chain.tau is not None and chain.tau > 0.018
    assert pairs.tau is not None and 0.006 <= pairs.tau <= 0.014
    # 40 pairs that share no session: 40 degrees of freedom (a chain's 200 differences give 133)
    assert pairs.n_differences == 40 and pairs.df == 40.0 and pairs.method == RERUN_METHOD
    too_few = rerun_variances({"c": [(history[-1][i], rerun[i]) for i in range(2)]})["c"]
    assert too_few.tau2 is None and too_few.df is None


def test_too_few_differences_say_unknown_and_one_value_sessions_are_skipped() -> None:
    sv = session_variance([[[100.0, 101.0], [102.0, 103.0]], [[100.0], [101.0, 102.0]]])
    assert sv.n_differences == 1 < MIN_DIFFERENCES and sv.tau2 is None and sv.df is None


def test_session_noise_in_the_test_keeps_false_verdicts_at_5pct_and_coverage_at_95() -> None:
    """2% session level, 20 cells, 5 earlier releases, n = 5: ignored, 19% of unchanged comparisons
    were verdicts and intervals covered 65%; with tau^2 added, <= 5% and 93-97%, a 15% drop found."""
    rng = np.random.default_rng(2027)
    false = covered = total = found = 0
    releases = 60
    for _ in range(releases):
        history = [_release(rng, 20, 5, 0.02) for _ in range(5)]
        truth = np.ones(20)
        truth[-1] = 0.85
        new = _release(rng, 20, 5, 0.02, truth)
        sv = session_variance([[h[i] for h in history] for i in range(20)])
        assert sv.tau2 is not None
        pairs = [
            ReleasePair(history[-1][i], new[i], TPUT, session_var=2 * sv.tau2, session_df=sv.df)
            for i in range(20)
        ]
        res = compare_releases_many(pairs)
        for r in res[:-1]:
            assert r.change_ci_low is not None and r.change_ci_high is not None
            total += 1
            false += r.verdict in ("improved", "regressed")
            covered += r.change_ci_low <= 0.0 <= r.change_ci_high
        found += res[-1].verdict == "regressed"
    assert false / total <= 0.05
    assert 0.93 <= covered / total <= 0.97
    assert found / releases >= 0.9


def test_the_session_term_widens_the_interval_and_says_so() -> None:
    old, new = [100.0, 100.2, 99.8, 100.1, 99.9], [97.0, 97.2, 96.8, 97.1, 96.9]
    plain = compare_releases_many([ReleasePair(old, new, TPUT)], adjust=False)[0]
    note = "between-session variance added: tau 2%"
    pair = ReleasePair(old, new, TPUT, session_var=2 * 0.02**2, session_df=40.0, session_note=note)
    wide = compare_releases_many([pair], adjust=False)[0]
    assert plain.verdict == "regressed" and wide.verdict == "unchanged"
    assert wide.session_var == pytest.approx(0.0008) and wide.reasons[-1] == note
    assert plain.change_ci_low is not None and plain.change_ci_high is not None
    assert wide.change_ci_low is not None and wide.change_ci_high is not None
    assert wide.change_ci_high - wide.change_ci_low > 4 * (plain.change_ci_high - plain.change_ci_low)
    assert plain.change_pct is not None and wide.change_pct is not None
    assert math.isclose(wide.change_pct, plain.change_pct)
