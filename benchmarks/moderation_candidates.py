"""The designs tried for issues 27 and 28 beside the one the code runs: vectorised copies, seeded.

    PYTHONPATH=. .venv/bin/python benchmarks/moderation_candidates.py [--trials 4000] [--seed 0]
        [--only release adaptive sequential]

``release`` (issue 27): releases of 20 comparisons as in benchmarks/stats_simulation.py's table
``moderated`` (19 unchanged, one 10% drop at CV 2%, log-normal, Benjamini-Hochberg, a verdict
needing |change| >= 3%), each candidate on the same draws: how each side's variance is moderated
(the prior's df per side: full, a guard per side or per cell, robust empirical Bayes after Phipson
et al. 2016, a cap) and whether it is floored at the cell's own variance (both sides pooled, or
pooled with the cell's 4 earlier releases). Two scenarios beyond ``moderated``: one cell of 20 at
CV 3% in a CV 2% pool, and one cell whose new release is 1.5x noisier than its history and its
baseline. ``floor 1+(2/nu)^2`` is the code's (analysis/moderated.py); its figures match the table
``moderated`` within the draws' error.

``adaptive`` (issue 28): the sequential design of analysis/sequential.py (pools of 10 comparisons)
with its guard replaced by a floor at ``a`` x the comparison's own pooled variance, over alpha and
its spending; then a prior from each comparison's own history (5 sessions of 5 runs) with a floor,
when the release made the cell 1.5x noisier than its history.

``sequential`` (issue 28, second round): copies of the sequential design (:class:`Seq`) with the
alpha spent otherwise (Hwang-Shih-DeCani, explicit shares front-loaded on looks 3-5), fewer looks
(3, 4, 6, 10), a one-sided test after the first look in its direction, a prior with a fixed weight
(the pool's mean variance on all its sides' df, no estimated d0), a floor and a guard together, a
gate on the comparison's own t, and a prior from each cell's history; each on the cells that decide
(CV 2% at 0% and a 5% drop, CV 5% at 0%, the CV 3% cells of a 1.5/2/3% pool, one cell of 10 at
1.5x and 2x the noise of the pool and of its history), then on the full grid (CV 1/2/5%, drops
0/3/5/10%), pools of 10 comparisons.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ablate.backend.analysis.sequential import SequentialDesign, decide_codes, release_prior, squeezed

Z975 = float(special.ndtri(0.975))
HISTORY = 4  # earlier releases of each cell besides the baseline (the history floor)


@dataclass(frozen=True)
class Candidate:
    name: str
    prior: str = "full"  # full | guard-side | guard-cell | robust-side | robust-cell | cap | none
    prior_arg: float = 0.0
    floor: str = "none"  # none | own | own-nu | sqrt | history
    floor_arg: float = 0.0


CANDIDATES = (
    Candidate("Welch (no prior)", prior="none"),
    Candidate("per-side guard at F p < 0.2 (before)", prior="guard-side", prior_arg=0.2),
    Candidate("no guard (full shrinkage)"),
    Candidate("guard per cell (4 df) at 0.2", prior="guard-cell", prior_arg=0.2),
    Candidate("robust EB per side", prior="robust-side"),
    Candidate("robust EB per cell", prior="robust-cell"),
    Candidate("prior df capped at 8", prior="cap", prior_arg=8.0),
    Candidate("floor own x 1", floor="own", floor_arg=1.0),
    Candidate("floor own x 1.25", floor="own", floor_arg=1.25),
    Candidate("floor own x (1+(2/nu)^2) (the code)", floor="own-nu"),
    Candidate("floor own x 1.5", floor="own", floor_arg=1.5),
    Candidate("floor 1.5 sqrt(own/prior) prior", floor="sqrt", floor_arg=1.5),
    Candidate("floor own+4 earlier releases, 92% t", floor="history", floor_arg=0.08),
)
SCENARIOS: dict[str, tuple[list[float], bool, list[float] | None]] = {
    "CV 2%, one pool": ([0.02] * 20, False, None),
    "3 workloads (CV 1/2/5%)": ([(0.01, 0.02, 0.05)[i % 3] for i in range(19)] + [0.02], True, None),
    "CV 1/2/5% in one pool": ([(0.01, 0.02, 0.05)[i % 3] for i in range(19)] + [0.02], False, None),
    "rungs differ (CV 1.5/2/3%)": ([(0.015, 0.02, 0.03)[i % 3] for i in range(19)] + [0.02], False, None),
    "one cell of 20 at CV 3%": ([0.02] * 18 + [0.03, 0.02], False, None),
    "one cell's release 1.5x noisier": ([0.02] * 20, False, [0.02] * 18 + [0.03, 0.02]),
}


def _robust_df(f: np.ndarray, df1: float, d0: np.ndarray) -> np.ndarray:
    """Phipson et al. 2016 (limma robust=TRUE), simplified: each entry's prior df is d0 times
    min(1, its F tail p / its empirical tail p), monotone in the tail p; an outlier's df goes to 0."""
    k = f.shape[-1]
    tail = special.fdtrc(df1, d0[:, None], f)
    emp = (k - stats.rankdata(f, axis=-1) + 0.5) / k
    dfs = np.minimum(tail / emp, 1.0) * d0[:, None]
    order = np.argsort(tail, -1)
    ordered = np.take_along_axis(dfs, order, -1)
    mean = np.cumsum(ordered, -1) / np.arange(1, k + 1)
    low = np.argmin(mean, -1)[:, None]
    ordered = np.where(np.arange(k)[None, :] <= low, np.take_along_axis(mean, low, -1), ordered)
    out = np.empty_like(ordered)
    np.put_along_axis(out, order, np.maximum.accumulate(ordered, -1), -1)
    return out


def _prior_dfs(c: Candidate, a: np.ndarray, b: np.ndarray, s0: np.ndarray, d0: np.ndarray, d: float):
    """The prior's df for each new (a) and old (b) side of a pool: (T, k) each."""
    s0c, d0c = s0[:, None], d0[:, None]
    full = d0c + 0 * a
    if c.prior == "guard-side":
        tail = [(v > s0c) & (special.fdtrc(d, d0c, v / s0c) < c.prior_arg) for v in (a, b)]
        return np.where(tail[0], 0.0, full), np.where(tail[1], 0.0, full)
    if c.prior == "guard-cell":
        pooled = (a + b) / 2
        hit = (pooled > s0c) & (special.fdtrc(2 * d, d0c, pooled / s0c) < c.prior_arg)
        return np.where(hit, 0.0, full), np.where(hit, 0.0, full)
    if c.prior == "robust-side":
        dfs = _robust_df(np.concatenate([a, b], -1) / s0c, d, d0)
        return dfs[:, : a.shape[1]], dfs[:, a.shape[1] :]
    if c.prior == "robust-cell":
        dfs = _robust_df((a + b) / 2 / s0c, 2 * d, d0)
        return dfs, dfs
    if c.prior == "cap":
        return np.minimum(full, c.prior_arg), np.minimum(full, c.prior_arg)
    return full, full


def _floor(c: Candidate, a: np.ndarray, b: np.ndarray, hist: np.ndarray, s0: np.ndarray, d: float):
    """The least variance of each side of a cell (T, k)."""
    own, nu = (a + b) / 2, 2 * d
    if c.floor == "own":
        return c.floor_arg * own
    if c.floor == "own-nu":
        return (1.0 + (2.0 / nu) ** 2) * own
    if c.floor == "sqrt":
        return c.floor_arg * np.sqrt(own / s0[:, None]) * s0[:, None]
    if c.floor == "history":
        nu = (HISTORY + 2) * d
        factor = (special.stdtrit(nu, 1 - c.floor_arg / 2) / Z975) ** 2
        return factor * (hist.sum(-1) + a + b) / (HISTORY + 2)
    return np.zeros_like(a)


def _moderate(c: Candidate, va: np.ndarray, vb: np.ndarray, hist: np.ndarray, pools, d: float):
    """(variance, df) of every new and old side after candidate ``c``."""
    out = [va.copy(), np.full_like(va, d), vb.copy(), np.full_like(vb, d)]
    if c.prior == "none":
        return out
    for idx in pools:
        a, b = va[:, idx], vb[:, idx]
        s0, d0 = release_prior(np.concatenate([a, b], -1), d)
        dfa, dfb = _prior_dfs(c, a, b, s0, d0, d)
        least = _floor(c, a, b, hist[:, idx], s0, d)
        for j, (v, w) in enumerate(((a, dfa), (b, dfb))):
            shrunk = (w * s0[:, None] + d * v) / (w + d)
            out[2 * j][:, idx] = np.maximum(shrunk, least)
            out[2 * j + 1][:, idx] = w + d
    return out


def _bh(p: np.ndarray) -> np.ndarray:
    m = p.shape[-1]
    order = np.argsort(p, -1)
    q = np.take_along_axis(p, order, -1) * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(q[..., ::-1], -1)[..., ::-1]
    out = np.empty_like(q)
    np.put_along_axis(out, order, np.minimum(q, 1.0), -1)
    return out


def _release_rows(name: str, n: int, trials: int, seed: Sequence[int]) -> list[str]:
    cvs_list, by_cv, new_cvs = SCENARIOS[name]
    cvs = np.asarray(cvs_list)
    rng = np.random.default_rng(list(seed))
    s_old = np.sqrt(np.log1p(cvs**2))[None, :, None]
    s_new = s_old if new_cvs is None else np.sqrt(np.log1p(np.asarray(new_cvs) ** 2))[None, :, None]
    shift = np.zeros(cvs.size)
    shift[19] = math.log(0.9)
    new = shift[None, :, None] + s_new * rng.standard_normal((trials, cvs.size, n))
    old = s_old * rng.standard_normal((trials, cvs.size, n))
    hist = (s_old[..., None] * rng.standard_normal((trials, cvs.size, HISTORY, n))).var(-1, ddof=1)
    pools = [np.flatnonzero(cvs == v) for v in np.unique(cvs)] if by_cv else [np.arange(cvs.size)]
    eff = cvs if new_cvs is None else np.maximum(cvs, new_cvs)
    noisy = eff[:19] == eff[:19].max()
    est = new.mean(-1) - old.mean(-1)
    rows = []
    for c in CANDIDATES:
        vn, dn, vo, do = _moderate(c, new.var(-1, ddof=1), old.var(-1, ddof=1), hist, pools, n - 1.0)
        x, y = vn / n, vo / n
        se, df = np.sqrt(x + y), (x + y) ** 2 / (x * x / dn + y * y / do)
        q = _bh(2 * special.stdtr(df, -np.abs(est / se)))
        flagged = (q < 0.05) & (np.abs(np.expm1(est)) >= 0.03)
        half = special.stdtrit(df, 0.975) * se
        cover = (est[:, :19] - half[:, :19] <= 0) & (est[:, :19] + half[:, :19] >= 0)
        found = (flagged[:, 19] & (est[:, 19] < 0)).mean()
        rows.append(
            f"| {name} | {n} | {c.name} | {flagged[:, :19].mean():.1%} | {cover.mean():.1%} | "
            f"CV {eff[:19].max():.1%}: {cover[:, noisy].mean():.1%} | {found:.1%} |"
        )
    return rows


def release(trials: int, seed: int) -> None:
    print(f"\n### Issue 27: moderation candidates ({trials} releases a row, seed {seed})\n")
    print("| cells | n | design | false verdicts | coverage | coverage (noisiest) | 10% drop found |")
    print("|---|---|---|---|---|---|---|")
    for j, name in enumerate(SCENARIOS):
        for n in (3, 5):
            print("\n".join(_release_rows(name, n, trials, (seed, 27, j, n))), flush=True)


def _adaptive_run(
    design: SequentialDesign, cvs: Sequence[float], change: float, releases: int, rng, variance: Callable
) -> tuple[np.ndarray, np.ndarray]:
    """simulate_release with the variance of each look from ``variance(c, r, rows)``."""
    k, top = len(cvs), design.max_n
    sigma = np.sqrt(np.log1p(np.asarray(cvs, float) ** 2))[None, :, None]
    c = (math.log1p(change) + sigma * rng.standard_normal((releases, k, top))).reshape(-1, top)
    r = (sigma * rng.standard_normal((releases, k, top))).reshape(-1, top)
    codes, runs = np.zeros(releases * k, int), np.full(releases * k, top)
    open_ = np.ones(releases * k, bool)
    first = [x[:, : design.min_n].var(-1, ddof=1).reshape(releases, k) for x in (c, r)]
    s0, d0 = (np.repeat(v, k) for v in release_prior(np.concatenate(first, 1), design.min_n - 1))
    for n in range(design.min_n, top + 1):
        idx = np.flatnonzero(open_)
        if idx.size == 0:
            break
        est = c[idx, :n].mean(-1) - r[idx, :n].mean(-1)
        own = (c[idx, :n].var(-1, ddof=1) + r[idx, :n].var(-1, ddof=1)) / 2
        var, df = variance(own, 2.0 * n - 2, s0[idx], d0[idx])
        got = decide_codes(design, n, est, np.sqrt(var * 2 / n), df)
        hit = idx[got != 0]
        codes[hit], runs[hit], open_[hit] = got[got != 0], n, False
    return codes.reshape(releases, k), runs.reshape(releases, k)


def _floored(a: float) -> Callable:
    def variance(own, nu, s0, d0):
        return np.maximum((d0 * s0 + nu * own) / (d0 + nu), a * own), d0 + nu

    return variance


def _score(drop: float, codes: np.ndarray, runs: np.ndarray) -> tuple[float, float, float]:
    right = codes == (2 if drop == 0 else -1)
    false = np.abs(codes) == 1 if drop == 0 else (codes == 1) | ((codes == 2) & (drop * 100 >= 4.5))
    return float(right.mean()), float(false.mean()), float(runs.mean())


ADAPTIVE = ((1.0, 0.04, 1.5), (1.25, 0.04, 1.5), (1.0, 0.05, 1.5), (0.8, 0.05, 1.5), (0.8, 0.05, 1.0))
ADAPTIVE += ((0.8, 0.06, 2.0), (0.9, 0.055, 1.75), (0.0, 0.055, 1.75), (0.0, 0.06, 2.0))


def adaptive(trials: int, seed: int) -> None:
    print(
        f"\n### Issue 28: the guard replaced by a floor (pools of 10, {trials} trials a cell, seed {seed})\n"
    )
    print("| floor a | alpha / rho | CV 2% 0%: false | 5%: power | false | runs/side | CV 5% 0%: false |"
          " 1.5/2/3% pool, 3% cells 0%: false |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    rel = trials // 10
    mix = [(0.015, 0.02, 0.03)[i % 3] for i in range(10)]
    for a, alpha, rho in ADAPTIVE:
        d, v = SequentialDesign(min_n=3, max_n=10, alpha=alpha, alpha_rho=rho), _floored(a)

        def g(j: int) -> np.random.Generator:
            return np.random.default_rng([seed, 28, j])

        f0 = _score(0, *_adaptive_run(d, [0.02] * 10, 0, rel, g(1), v))[1]
        p5, f5, r5 = _score(0.05, *_adaptive_run(d, [0.02] * 10, -0.05, rel, g(2), v))
        f50 = _score(0, *_adaptive_run(d, [0.05] * 10, 0, rel, g(3), v))[1]
        codes, runs = _adaptive_run(d, mix, 0, rel, g(4), v)
        fm = _score(0, codes[:, np.array(mix) == 0.03], runs[:, np.array(mix) == 0.03])[1]
        print(
            f"| {a:g} | {alpha:g} / {rho:g} | {f0:.1%} | {p5:.1%} | {f5:.1%} | {r5:.2f} | {f50:.1%} | "
            f"{fm:.1%} |"
        )
    history(trials, seed)


def _history_run(design: SequentialDesign, cv_now: float, change: float, trials: int, rng, a: float):
    """Each comparison's prior from its two cells' 5 earlier sessions of 5 runs at CV 2%."""
    top, sh = design.max_n, math.sqrt(math.log1p(0.02**2))
    sn = math.sqrt(math.log1p(cv_now**2))
    s0 = (sh * rng.standard_normal((trials, 10, 5))).var(-1, ddof=1).mean(-1)
    d0 = np.full(trials, 40.0)
    c = math.log1p(change) + sn * rng.standard_normal((trials, top))
    r = sn * rng.standard_normal((trials, top))
    codes, runs, open_ = np.zeros(trials, int), np.full(trials, top), np.ones(trials, bool)
    for n in range(design.min_n, top + 1):
        idx = np.flatnonzero(open_)
        if idx.size == 0:
            break
        own = (c[idx, :n].var(-1, ddof=1) + r[idx, :n].var(-1, ddof=1)) / 2
        var, df = _floored(a)(own, 2.0 * n - 2, s0[idx], d0[idx])
        est = c[idx, :n].mean(-1) - r[idx, :n].mean(-1)
        got = decide_codes(design, n, est, np.sqrt(var * 2 / n), df)
        hit = idx[got != 0]
        codes[hit], runs[hit], open_[hit] = got[got != 0], n, False
    return codes, runs


def history(trials: int, seed: int) -> None:
    print(
        f"\n### Issue 28: a prior from each comparison's history (5x5), floored ({trials} trials, "
        f"seed {seed})\n"
    )
    print("| floor a | alpha / rho | as history 0%: false | 5%: power | false | runs/side |"
          " 1.5x noisier 0%: false | 5%: power | runs/side |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for a in (0.0, 0.8, 1.0, 1.25):
        for alpha, rho in ((0.025, 1.0), (0.04, 1.5)):
            d = SequentialDesign(min_n=3, max_n=10, alpha=alpha, alpha_rho=rho)
            rng = [np.random.default_rng([seed, 29, j]) for j in range(4)]
            f0 = _score(0, *_history_run(d, 0.02, 0, trials, rng[0], a))[1]
            p5, f5, r5 = _score(0.05, *_history_run(d, 0.02, -0.05, trials, rng[1], a))
            fn = _score(0, *_history_run(d, 0.03, 0, trials, rng[2], a))[1]
            pn, _, rn = _score(0.05, *_history_run(d, 0.03, -0.05, trials, rng[3], a))
            print(f"| {a:g} | {alpha:g} / {rho:g} | {f0:.1%} | {p5:.1%} | {f5:.1%} | {r5:.2f} | {fn:.1%} | "
                  f"{pn:.1%} | {rn:.2f} |")  # fmt: skip


# --- Issue 28, second round: spending shapes, fewer looks, one-sided, priors without an estimated d0.
LOOKS = tuple(range(3, 11))


@dataclass(frozen=True)
class Seq:
    """One adaptive candidate: how alpha is spent over which looks, and the variance of each look."""

    name: str
    alpha: float = 0.04
    spend: str = "power"  # power: alpha t^shape | hsd: Hwang-Shih-DeCani gamma = shape | shares
    shape: float = 1.5
    shares: tuple[float, ...] = ()  # alpha per look (spend "shares")
    looks: tuple[int, ...] = LOOKS
    variance: str = "guard"  # guard (p = arg) | floor (a = arg) | none
    arg: float = 0.2
    prior: str = "session"  # session (d0 estimated) | pooled (d0 = all sides' df) | history (5x5, 40 df)
    one_sided: bool = False  # after the first look, one-sided at the full share, first look's direction
    floor: float = 0.0  # a guard's variance also floored at this x the comparison's own
    gate: float = 0.0  # also needs the comparison's own t (own variance, own df) beyond this level

    def levels(self, top: int = 10) -> list[tuple[float, float]]:
        """(alpha, beta) of each look: the spending function's increment since the previous look."""
        if self.spend == "shares":
            alphas = list(self.shares)
        else:
            t = np.asarray(self.looks, float) / top
            if self.spend == "power":
                spent = self.alpha * t**self.shape
            else:
                g = self.shape
                spent = self.alpha * (t if g == 0 else (1 - np.exp(-g * t)) / (1 - math.exp(-g)))
            alphas = list(np.diff(spent, prepend=0.0))
        beta = 0.05 * (np.asarray(self.looks, float) / top) ** 0.5
        return list(zip(alphas, np.diff(beta, prepend=0.0), strict=True))


def _seq_decide(a: float, b: float, est, se, df, side) -> np.ndarray:
    """decide_codes with explicit levels; ``side`` (+-1, or 0 for two-sided): one-sided at ``a``."""
    thr, margin = math.log1p(0.03), math.log1p(0.045)
    two = side == 0
    crit = special.stdtrit(df, 1.0 - np.where(two, a / 2.0, a))
    changed = (np.abs(est) > crit * se) & (np.abs(est) >= thr) & (two | (np.sign(est) == side))
    codes = np.where(changed, np.where(est > 0, 1, -1), 0)
    half = special.stdtrit(df, 1.0 - b) * se
    same = (est + half < margin) & (est - half > -margin)
    return np.where((codes == 0) & same, 2, codes)


def _seq_run(s: Seq, cvs: Sequence[float], change: float, releases: int, rng, hist_cvs=None):
    """(codes, runs), each (releases, len(cvs)): pools of comparisons as simulate_release, with the
    variance and the levels of candidate ``s``; ``hist_cvs``: each cell's noise in its 5 earlier
    sessions of 5 runs (the history prior), by default its noise now."""
    k, top, m = len(cvs), 10, 3
    sig = np.sqrt(np.log1p(np.asarray(cvs, float) ** 2))[None, :, None]
    c = (math.log1p(change) + sig * rng.standard_normal((releases, k, top))).reshape(-1, top)
    r = (sig * rng.standard_normal((releases, k, top))).reshape(-1, top)
    if s.prior == "history":
        hs = np.sqrt(np.log1p(np.asarray(cvs if hist_cvs is None else hist_cvs, float) ** 2))
        s0 = (hs[None, :, None] * rng.standard_normal((releases, k, 10, 5))).var(-1, ddof=1).mean(-1)
        s0, d0 = s0.reshape(-1), np.full(releases * k, 40.0)
    else:
        first = np.concatenate([x[:, :m].var(-1, ddof=1).reshape(releases, k) for x in (c, r)], 1)
        if s.prior == "pooled":
            s0, d0 = first.mean(-1), np.full(releases, 2.0 * first.shape[1])
        else:
            s0, d0 = release_prior(first, m - 1.0)
        s0, d0 = np.repeat(s0, k), np.repeat(d0, k)
    codes, runs = np.zeros(releases * k, int), np.full(releases * k, top)
    open_, side = np.ones(releases * k, bool), np.zeros(releases * k)
    for n, (a, b) in zip(s.looks, s.levels(top), strict=True):
        idx = np.flatnonzero(open_)
        est = c[idx, :n].mean(-1) - r[idx, :n].mean(-1)
        own, nu = (c[idx, :n].var(-1, ddof=1) + r[idx, :n].var(-1, ddof=1)) / 2, 2.0 * n - 2
        if s.variance == "guard":
            var, df = squeezed(own, nu, (s0[idx], d0[idx]), s.arg)
            var = np.maximum(var, s.floor * own)
        else:
            var, df = (d0[idx] * s0[idx] + nu * own) / (d0[idx] + nu), d0[idx] + nu
            if s.variance == "floor":
                var = np.maximum(var, s.arg * own)
        got = _seq_decide(a, b, est, np.sqrt(var * 2 / n), df, side[idx] if n > s.looks[0] else 0)
        if s.gate > 0:
            weak = np.abs(est) <= special.stdtrit(nu, 1 - s.gate / 2) * np.sqrt(own * 2 / n)
            got = np.where(weak & (np.abs(got) == 1), 0, got)
        if s.one_sided and n == s.looks[0]:
            side[idx] = np.sign(est)
        hit = idx[got != 0]
        codes[hit], runs[hit], open_[hit] = got[got != 0], n, False
    return codes.reshape(releases, k), runs.reshape(releases, k)


MIX = (0.015, 0.02, 0.03)
ONE_NOISY = (0.02,) * 9 + (0.03,)  # one cell of 10 at 1.5x the pool's (and its own history's) noise


def _seq_screen(s: Seq, trials: int, seed: int) -> dict[str, float]:
    """The figures that decide between candidates, each on ``trials`` comparisons (the same draws
    for every candidate with the same prior)."""

    def g(j: int) -> np.random.Generator:
        return np.random.default_rng([seed, 30, j])

    rel = -(-trials // 10)
    out = {}
    out["f0"] = _score(0, *_seq_run(s, [0.02] * 10, 0, rel, g(1)))[1]
    out["p5"], out["f5"], out["r5"] = _score(0.05, *_seq_run(s, [0.02] * 10, -0.05, rel, g(2)))
    out["f5cv"] = _score(0, *_seq_run(s, [0.05] * 10, 0, rel, g(3)))[1]
    mix = [MIX[i % 3] for i in range(10)]  # the CV 3% cells are the 3rd, 6th and 9th
    codes, runs = _seq_run(s, mix, 0, -(-trials // 3), g(4))
    out["fmix"] = _score(0, codes[:, 2::3], runs[:, 2::3])[1]
    codes, runs = _seq_run(s, ONE_NOISY, 0, trials, g(5), hist_cvs=[0.02] * 10)
    out["fone"] = _score(0, codes[:, -1:], runs[:, -1:])[1]
    codes, runs = _seq_run(s, ONE_NOISY, -0.05, trials, g(6), hist_cvs=[0.02] * 10)
    out["pone"], _, out["rone"] = _score(0.05, codes[:, -1:], runs[:, -1:])
    codes, runs = _seq_run(s, (*ONE_NOISY[:-1], 0.04), 0, trials, g(7), hist_cvs=[0.02] * 10)
    out["ftwo"] = _score(0, codes[:, -1:], runs[:, -1:])[1]
    return out


P, FRONT = "pooled", (0.0085, 0.0075, 0.0065, 0.005, 0.003, 0.002, 0.001, 0.0005)
# Rows 2-6 (spending, looks, one-sided) on the pooled prior with the guard, to compare with row 7.
SEQ = (
    Seq("the code: EB prior, guard 0.2, 0.04 / t^1.5"),
    Seq("HSD gamma -1 (late), 0.04, guard 0.2", prior=P, spend="hsd", shape=-1),
    Seq("HSD gamma 1 (early), 0.03, guard 0.2", prior=P, alpha=0.03, spend="hsd", shape=1),
    Seq("looks 3, 4, 6, 10 only, guard 0.2", prior=P, looks=(3, 4, 6, 10)),
    Seq("looks 3, 4, 5, 6, 8, 10, guard 0.2", prior=P, looks=(3, 4, 5, 6, 8, 10)),
    Seq("one-sided after look 3 (its direction), guard 0.2", prior=P, one_sided=True),
    Seq("pooled prior (d0 = 40), guard 0.2", prior=P),
    Seq("pooled prior, guard 0.2, 0.05 / t^1.5", prior=P, alpha=0.05),
    Seq("pooled prior, no guard", prior=P, variance="none"),
    Seq("pooled prior, floor 1, 0.05 / t^1.5", prior=P, variance="floor", arg=1, alpha=0.05),
    Seq(
        "pooled prior, floor 1, front-loaded", prior=P, variance="floor", arg=1, spend="shares", shares=FRONT
    ),
    Seq("pooled prior, floor 1 + own-t gate 0.3", prior=P, variance="floor", arg=1, gate=0.3),
    Seq(
        "pooled prior, guard 0.1 + floor 1, front-loaded",
        prior=P,
        arg=0.1,
        floor=1,
        spend="shares",
        shares=FRONT,
    ),
    Seq(
        "pooled prior, guard 0.05 + floor 1, front-loaded",
        prior=P,
        arg=0.05,
        floor=1,
        spend="shares",
        shares=FRONT,
    ),
    Seq("EB prior, guard 0.1 + floor 1, front-loaded", arg=0.1, floor=1, spend="shares", shares=FRONT),
    Seq(
        "history prior (5x5), guard 0.1 + floor 1, front-loaded",
        prior="history",
        arg=0.1,
        floor=1,
        spend="shares",
        shares=FRONT,
    ),
)


def sequential(trials: int, seed: int) -> None:
    """Issue 28's second round: every Seq on the deciding cells, then each on the full grid."""
    print(f"\n### Issue 28: spending, looks, priors and floors ({trials} trials a cell, seed {seed})\n")
    print("| design | CV 2% 0%: false | 5%: power | false | runs/side | CV 5% 0%: false |"
          " 1.5/2/3% pool, 3% cells 0%: false | one cell 1.5x noisier 0%: false | 5%: power, runs |"
          " one cell 2x noisier 0%: false |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in SEQ:
        o = _seq_screen(s, trials, seed)
        print(f"| {s.name} | {o['f0']:.1%} | {o['p5']:.1%} | {o['f5']:.1%} | {o['r5']:.2f} | "
              f"{o['f5cv']:.1%} | {o['fmix']:.1%} | {o['fone']:.1%} | {o['pone']:.1%}, {o['rone']:.2f} | "
              f"{o['ftwo']:.1%} |", flush=True)  # fmt: skip
    print("\nEach design in pools of 10 comparisons of one CV: right / false / runs a side\n")
    print("| design | CV | 0% | 3% drop | 5% drop | 10% drop |")
    print("|---|---|---|---|---|---|")
    for s in SEQ:
        for i, cv in enumerate((0.01, 0.02, 0.05)):
            cells = []
            for j, drop in enumerate((0.0, 0.03, 0.05, 0.10)):
                rng = np.random.default_rng([seed, 31, i, j])
                codes, runs = _seq_run(s, [cv] * 10, -drop, -(-trials // 10), rng)
                right, false, mean = _score(drop, codes, runs)
                cells.append(f"{right:.1%} / {false:.1%} / {mean:.2f}")
            print(f"| {s.name} | {cv:.0%} | {' | '.join(cells)} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--trials", type=int, default=4000, help="releases a row (release), trials a cell x 5 (adaptive)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=["release", "adaptive", "sequential"])
    args = ap.parse_args()
    if "release" in args.only:
        release(args.trials, args.seed)
    if "adaptive" in args.only:
        adaptive(args.trials * 5, args.seed)
    if "sequential" in args.only:
        sequential(args.trials * 5, args.seed)


if __name__ == "__main__":
    main()
