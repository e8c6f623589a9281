"""The batched numerics of a release (share intervals of every ladder, session variances of every pool)
give exactly the numbers the one-at-a-time computation gives, on a randomized release."""

from __future__ import annotations

import itertools

import numpy as np

from ablate.backend.analysis.ablation import LadderInput, analyze_ladders
from ablate.backend.analysis.session import MIN_DIFFERENCES, session_variances

from .helpers import N_RESAMPLES

LADDER = ["Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt"]


def _release(rng: np.random.Generator, ladders: int) -> list[LadderInput]:
    out = []
    for _ in range(ladders):
        rungs = []
        for j, name in enumerate(LADDER[: int(rng.integers(2, 6))]):
            size = int(rng.choice([0, 1, 2, 3, 5, 5, 8]))
            gain = 1.0 + 0.08 * j * float(rng.choice([1.0, -1.0, 0.01]))
            rungs.append((name, (1000.0 * gain * np.exp(rng.normal(0, 0.02, size))).tolist()))
        out.append(LadderInput(rungs, str(rng.choice(["throughput_tokens_per_s", "step_time_s"]))))
    return out


def _share_intervals_one(values: list[np.ndarray], confidence: float, seed: int) -> list[tuple[float, float]]:
    """The per-ladder computation: pivotal draws of each rung's mean log, percentiles of each share."""
    logs = [np.log(v) for v in values]
    rng = np.random.default_rng(seed)
    draws = np.stack(
        [y.mean() - rng.standard_t(y.size - 1, N_RESAMPLES) * y.std(ddof=1) / np.sqrt(y.size) for y in logs]
    )
    total = draws[-1] - draws[0]
    tail = (1.0 - confidence) / 2.0 * 100.0
    out = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(1, len(logs)):
            share = (draws[j] - draws[j - 1]) / total
            lo, hi = np.percentile(share[np.isfinite(share)], [tail, 100.0 - tail])
            out.append((float(lo), float(hi)))
    return out


def test_share_intervals_of_a_release_equal_one_ladder_at_a_time():
    rng = np.random.default_rng(2029)
    ladders = _release(rng, 300)
    analyses = analyze_ladders(ladders, n_resamples=N_RESAMPLES, seed=3)
    checked = 0
    for item, analysis in zip(ladders, analyses, strict=True):
        chain = [v for v in analysis.variants if v.summary.n > 0]
        if not any(v.share is not None for v in chain) or any(v.summary.n < 2 for v in chain):
            continue
        values = [np.sort(np.asarray(dict(item.rungs)[v.variant], dtype=float)) for v in chain]
        expected = _share_intervals_one(values, analysis.confidence, 3)
        got = [(v.share_ci_low, v.share_ci_high) for v in chain[1:]]
        assert got == expected
        checked += 1
    assert checked > 50  # the release has many ladders with shares, of several shapes


def _session_one(values: list[float]) -> tuple[float, float] | None:
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or not (arr > 0).all():
        return None
    logs = np.log(arr)
    return float(logs.mean()), float(logs.var(ddof=1)) / arr.size


def test_session_variances_of_every_pool_equal_one_session_at_a_time():
    rng = np.random.default_rng(7)
    pools = {}
    for key in range(30):
        cells = []
        for _ in range(int(rng.integers(1, 12))):
            sessions = []
            for _ in range(int(rng.integers(0, 7))):
                v = 100.0 * np.exp(
                    rng.normal(0, 0.02, int(rng.choice([0, 1, 2, 3, 5]))) + rng.normal(0, 0.01)
                )
                values = v.tolist()
                if values and rng.random() < 0.05:
                    values[0] = 0.0  # a non-positive value: the session is skipped
                sessions.append(values)
            cells.append(sessions)
        pools[key] = cells
    got = session_variances(pools)
    for key, cells in pools.items():
        d2 = w = 0.0
        m = 0
        for sessions in cells:
            for a, b in itertools.pairwise([_session_one(s) for s in sessions]):
                if a is not None and b is not None:
                    d2 += (b[0] - a[0]) ** 2
                    w += a[1] + b[1]
                    m += 1
        assert got[key].n_differences == m
        if m >= MIN_DIFFERENCES:
            assert got[key].tau2 == max(0.0, (d2 - w) / (2.0 * m))
        else:
            assert got[key].tau2 is None
