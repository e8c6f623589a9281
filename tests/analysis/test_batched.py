"""The batched numerics of a release (share intervals of every ladder, session variances of every pool,
Welch tests of every pair, moderation priors of every pool) give exactly the numbers the one-at-a-time
computation gives, on a randomized release."""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import special

from ablate.backend.analysis.ablation import LadderInput, LadderOptions, analyze_ladders
from ablate.backend.analysis.moderated import (
    Prior,
    _digamma_half,
    _trigamma_half,
    cell_floor,
    prior_variance,
    squeeze,
)
from ablate.backend.analysis.release_pair import ReleasePair, _priors
from ablate.backend.analysis.session import MIN_DIFFERENCES, session_variances
from ablate.backend.analysis.stats import (
    LOG_RESOLUTION,
    MODERATED_LOG_TEST,
    TWO_VALUES_LOG_TEST,
    TWO_VALUES_MAX_DF,
    WELCH_LOG_TEST,
    clean_many,
    clean_values,
    mean_sd,
)
from ablate.backend.analysis.welch import WelchInput, WelchLog, welch_log_many

from .helpers import N_RESAMPLES

LADDER = ["Base", "Base+ACCL", "AC2+ACCL", "AC2+ACCL+CompilerOpt", "AC2+ACCL+CompilerOpt+CkptOpt"]


def _release(rng: np.random.Generator, ladders: int) -> list[LadderInput]:
    out = []
    for _ in range(ladders):
        rungs = []
        for j, name in enumerate(LADDER[: int(rng.integers(2, 6))]):
            size = int(rng.choice([0, 1, 2, 3, 5, 5, 8, 13]))
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
    analyses = analyze_ladders(ladders, options=LadderOptions(n_resamples=N_RESAMPLES, seed=3))
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


def _welch_one(inp: WelchInput, confidence: float = 0.95) -> WelchLog | None:
    """Welch's t on logs of one pair, scalar calls: the computation before the batch (analysis/welch.py)."""
    c, r = inp.c, inp.r
    if c.size < 2 or r.size < 2 or c[0] <= 0 or r[0] <= 0:
        return None
    ref = float(r[0])

    def ratios(x: np.ndarray) -> list[float]:
        if x[0] >= ref * 1e-300 and x[-1] <= ref * 1e300:
            return np.log(x / ref).tolist()
        return (np.log(x) - math.log(ref)).tolist()

    (mc, sc), (mr, sr) = mean_sd(ratios(c)), mean_sd(ratios(r))
    sc, sr = (0.0 if s < LOG_RESOLUTION else s for s in (sc, sr))
    nc, nr = int(c.size), int(r.size)
    dfc, dfr = float(nc - 1), float(nr - 1)
    moderated = inp.prior is not None and (sc > 0 or sr > 0)
    if moderated:
        floor = cell_floor([(sc * sc, dfc), (sr * sr, dfr)])
        (varc, dfc), (varr, dfr) = (
            squeeze(sc * sc, dfc, inp.prior, floor),
            squeeze(sr * sr, dfr, inp.prior, floor),
        )
        sc, sr = math.sqrt(varc), math.sqrt(varr)
    vc, vr = sc * sc / nc, sr * sr / nr
    extra = inp.extra_var if inp.extra_var > 0 else 0.0
    se = math.sqrt(vc + vr + extra)
    extra_term = extra * extra / inp.extra_df if extra and inp.extra_df else 0.0
    denom = vc * vc / dfc + vr * vr / dfr + extra_term
    df = (vc + vr + extra) ** 2 / denom if denom > 0 else (math.inf if se > 0 else 0.0)
    method = MODERATED_LOG_TEST if moderated else WELCH_LOG_TEST
    if min(nc, nr) == 2 and not moderated:
        df, method = min(df, TWO_VALUES_MAX_DF), TWO_VALUES_LOG_TEST
    est = mc - mr
    if se == 0.0:
        return WelchLog(est, 0.0, None, 0.0 if abs(est) >= LOG_RESOLUTION else 1.0, est, est, method)
    p = float(2.0 * special.stdtr(df, -abs(est / se)))
    half = float(special.stdtrit(df, 0.5 + confidence / 2.0)) * se
    return WelchLog(est, se, df, min(1.0, p), est - half, est + half, method)


def _side(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.choice([0, 1, 2, 2, 3, 5, 5, 8]))
    scale = float(rng.choice([1000.0, 1000.0, 1e-200, 1e200, 7.5]))
    x = scale * np.exp(rng.normal(0, float(rng.choice([0.0, 1e-14, 0.02, 0.3])), n))
    if n and rng.random() < 0.05:
        x[0] = 0.0  # a non-positive value: not testable
    return clean_values(x)


def test_welch_of_a_release_equals_one_pair_at_a_time():
    rng = np.random.default_rng(11)
    priors = [None, Prior(4e-4, 12.0, 20), Prior(1e-6, 3.5, 10), Prior(0.09, 1e4, 40)]
    inputs = [
        WelchInput(
            _side(rng),
            _side(rng),
            float(rng.choice([0.0, 0.0, 1e-4, 0.02])),
            None if rng.random() < 0.3 else float(rng.uniform(1, 30)),
            priors[int(rng.integers(0, len(priors)))],
        )
        for _ in range(3000)
    ]
    got = welch_log_many(inputs)
    expected = [_welch_one(i) for i in inputs]
    assert got == expected
    assert sum(t is not None and t.method == MODERATED_LOG_TEST for t in got) > 300
    assert sum(t is not None and t.se == 0.0 for t in got) > 10  # zero spread on both sides


def test_priors_of_a_release_equal_one_side_at_a_time():
    rng = np.random.default_rng(5)
    pairs, cleaned = [], []
    for i in range(600):
        b, c = _side(rng), _side(rng)
        metric = str(rng.choice(["throughput_tokens_per_s", "mfu"]))
        pairs.append(ReleasePair(b, c, metric, pool=f"w{i % 23}"))
        cleaned.append((b, c))
    sides: dict[tuple[str, str | None], list[tuple[float, int]]] = {}
    for p, arrays in zip(pairs, cleaned, strict=True):
        for x in arrays:
            if x.size >= 2 and x[0] > 0:
                side = (float(np.log(x).var(ddof=1)), int(x.size) - 1)
                sides.setdefault((p.metric, p.pool), []).append(side)
    expected = {k: prior for k, s in sides.items() if (prior := prior_variance(s)) is not None}
    got = _priors(pairs, cleaned)
    assert got == expected and len(got) > 20
    # The cached digamma and trigamma of each side's df are scipy's.
    for d in range(1, 30):
        assert _digamma_half(d) == special.digamma(d / 2.0)
        assert _trigamma_half(d) == special.polygamma(1, d / 2.0)


def test_lookback_and_trend_p_values_match_one_at_a_time() -> None:
    """The lookback and trend checks' p-values, one ufunc call per release, are the scalar ones."""
    from ablate.backend.analysis.lookback_checks import LookbackRequest, lookback_many, trend_many
    from ablate.backend.analysis.stats import t_two_sided_p

    rng = np.random.default_rng(29)
    requests = []
    for _ in range(400):
        history = (100.0 * np.exp(rng.normal(0, 0.03, int(rng.integers(0, 9))))).tolist()
        if rng.random() < 0.1:
            history = [100.0] * len(history)  # no spread: the exact branch
        new = float(rng.choice([100.0, 100.0 * math.exp(rng.normal(0, 0.05))]))
        requests.append(LookbackRequest(new, history, "throughput_tokens_per_s"))
    looks, trends = lookback_many(requests), trend_many(requests)
    spoke = 0
    for lk, tr in zip(looks, trends, strict=True):
        if lk.t is not None:
            assert lk.p_value == t_two_sided_p(lk.t, lk.n_history - 1)
            spoke += 1
        if tr.t is not None:
            assert tr.p_value == t_two_sided_p(tr.t, tr.n_releases - 2)
    assert spoke > 100


def test_clean_many_is_clean_values_of_each_sample() -> None:
    """The samples of one size cleaned as one block: each row the array clean_values gives, bit for bit,
    whatever the kind of sample (list, tuple, array, generator) and size (none included)."""
    rng = np.random.default_rng(11)
    kept: list[list[float]] = []
    for k in range(400):
        size = int(rng.choice([0, 1, 2, 3, 5, 5, 8, 13]))
        values = (1000.0 * np.exp(rng.normal(0, 0.05, size))).tolist()
        if k % 9 == 0:
            values = [float(v) for v in rng.integers(-3, 3, size)]  # ties, zeros, negatives
        kept.append(values)
    kinds = (list, tuple, np.array, iter)
    cleaned = clean_many([kinds[k % 4](values) for k, values in enumerate(kept)])
    for got, values in zip(cleaned, kept, strict=True):
        want = clean_values(values)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    for bad in ([1.0, math.nan], (math.inf, 2.0), [[1.0, 2.0], [3.0, -math.inf]][1]):
        try:
            clean_many([[1.0, 2.0], bad])
        except ValueError as e:
            assert "finite" in str(e)
        else:
            raise AssertionError(f"{bad} was accepted")
