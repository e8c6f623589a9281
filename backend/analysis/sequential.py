"""Adaptive repeats: a group-sequential decision, after each round, whether a comparison is decided.

A plan with ``repeats: {min, max}`` looks at each comparison after every round from ``min`` runs a
side up to ``max``. Each look may end it:

* **regressed / improved**: the change is at least ``threshold_pct`` and the two-sided test at
  this look's share of ``alpha`` rejects "no change";
* **unchanged**: the interval at this look's share of ``beta`` (two one-sided tests) lies inside
  +-``margin_pct``;
* otherwise the comparison runs on; at ``max`` it is **inconclusive**, with the smallest change the
  runs could have detected (:attr:`Look.detectable_pct`).

Why the errors stay honest under repeated looks: each kind of error is spent over the looks by a
power spending function, ``total * (n / max) ** rho`` (Kim and DeMets), and a look may use only the
increment spent since the previous look. If each look's test has its level, by the union bound the
chance of any false "changed" over all looks is at most ``alpha`` (and of a false "unchanged" at
most ``beta``), whatever the correlation between looks. ``alpha = 0.04`` in all, spent with
``rho = 1.5``: the first look (which holds the shares of 1..min) gets the largest single share,
later looks a little more each, since at a low noise level the 3% threshold already keeps a late
look from a false change. ``benchmarks/adaptive_simulation.py`` measures the real rates and chose
these (docs/statistics.md, "Adaptive repeats").

The test is Student's t on log values with the variance pooled over both sides (two rungs measured
in one session on one cluster share a noise level), shrunk toward the prior of its pool (a
workload's sides in the study), the moderated t of :mod:`ablate.backend.analysis.moderated`: at 3
runs a side a comparison's own variance has 4 degrees of freedom (a boundary of 5.2 at the first
look's alpha), the pool's prior adds up to thousands. Each look's moderated t has its level where
the pool's cells draw their noise from one distribution (Smyth 2004); the prior is estimated once,
from every side's first ``min`` runs, so it is fixed before any look and no stopping decision can
select the variances it is made of. Where the cells of a pool differ in noise by kind, the prior
is calibrated on average, not per cell: the noisier cells' false changes rise (measured: 4.4% for
CV 3% cells in a pool of 1.5/2/3%, against 2.6% on their own; the guard of :func:`squeezed`
keeps a comparison noisier than the prior beyond chance on its own variance, where the release
verdict floors it at its own: the floor saved no runs here, docs/statistics.md), which is why a
pool is one workload, as in the release verdict. Below
``MIN_SIDES`` sides a comparison keeps its own variance. The one place a between-session variance
term enters is :func:`pooled_log_t`'s ``session_var``.

Numbers in, dataclasses out; vectorised over trials so the simulation runs the same code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from ablate.backend.analysis.moderated import GUARD_P, MAX_PRIOR_DF, MIN_SIDES
from ablate.backend.domain.metrics import Direction
from ablate.backend.domain.statistics import THRESHOLD_PCT

SEQUENTIAL_METHOD = (
    "group-sequential student-t on log values (pooled variance, moderated toward the workload's prior "
    "from every side's first min runs where it has 10 sides or more); alpha 0.04 spent as "
    "alpha*(n/max)^1.5 with the prior, 0.05 as alpha*(n/max)^1.25 without; beta 0.05 as "
    "beta*(n/max)^0.5 over the looks (union bound)"
)
# Without a prior (fewer than MIN_SIDES sides) the comparison's own t has heavy tails, so the 3%
# threshold filters more of its false changes and alpha can be larger: 1.2% false changes at CV 2%.
ALONE_ALPHA, ALONE_RHO = 0.05, 1.25
REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE = "regressed", "improved", "unchanged", "inconclusive"
# Codes of the vectorised decision: 0 runs on.
_CONTINUE, _IMPROVED, _REGRESSED, _UNCHANGED = 0, 1, -1, 2
_NAMES = {_IMPROVED: IMPROVED, _REGRESSED: REGRESSED, _UNCHANGED: UNCHANGED}
# Power at which the smallest detectable change of an inconclusive comparison is stated.
DETECTABLE_POWER = 0.8


@dataclass(frozen=True)
class SequentialDesign:
    """When to stop. Defaults chosen by the simulation (docs/statistics.md, "Adaptive repeats")."""

    min_n: int
    max_n: int
    alpha: float = 0.04  # spent on "regressed"/"improved" over all looks: bounds a false change
    beta: float = 0.05  # spent on "unchanged" over all looks
    # alpha and its shape, chosen by the simulation's --sweep (pools of 10 comparisons): 0.04 with
    # 1.5 keeps false changes at CV 2% at 1.3%; 0.05 with 1.5 (0.11 fewer runs a side for a 5%
    # change) leaves no room under the 1.5% goal.
    alpha_rho: float = 1.5
    beta_rho: float = 0.5  # < 1 spends early: an unchanged comparison stops sooner
    threshold_pct: float = THRESHOLD_PCT  # the smallest change called regressed/improved (as regression.py)
    margin_pct: float = 4.5  # "unchanged" means inside +-margin (below the 5% change it must not hide)
    # The guard's one-sided level (moderated.GUARD_P, the release verdict's before its floor): a
    # comparison noisier than the prior beyond it keeps its own variance. A fifth of equal-noise
    # comparisons at 0.2, the largest single cost in runs; a lower level lets the noisier cells of a
    # mixed pool through (the simulation's --sweep measures both; a floor instead saved no runs).
    guard_p: float = GUARD_P

    def alone(self) -> SequentialDesign:
        """This design for a comparison with no prior: :data:`ALONE_ALPHA`, :data:`ALONE_RHO`. Which
        one applies is fixed before any look (how many of a workload's sides have ``min`` runs)."""
        return replace(self, alpha=ALONE_ALPHA, alpha_rho=ALONE_RHO)

    def __post_init__(self) -> None:
        if not 2 <= self.min_n <= self.max_n:
            raise ValueError(f"need 2 <= min ({self.min_n}) <= max ({self.max_n})")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError(f"alpha ({self.alpha}) and beta ({self.beta}) must lie in (0, 1)")
        if not (self.alpha_rho > 0 and self.beta_rho > 0):
            raise ValueError(f"alpha_rho ({self.alpha_rho}) and beta_rho ({self.beta_rho}) must be above 0")
        if not 0 <= self.guard_p < 1:
            raise ValueError(f"guard_p ({self.guard_p}) must lie in [0, 1)")

    def _spent(self, n: int, total: float, rho: float) -> float:
        if n < self.min_n:
            return 0.0
        return total * min(1.0, n / self.max_n) ** rho

    def levels(self, n: int) -> tuple[float, float]:
        """(alpha, beta) this look at ``n`` runs a side may use: what was spent since ``n - 1``.
        A skipped look's share is lost, never carried (the bound stays a bound)."""
        return (
            self._spent(n, self.alpha, self.alpha_rho) - self._spent(n - 1, self.alpha, self.alpha_rho),
            self._spent(n, self.beta, self.beta_rho) - self._spent(n - 1, self.beta, self.beta_rho),
        )


@dataclass(frozen=True)
class Look:
    """One comparison at one look. ``verdict`` None: not decided yet, runs on."""

    n: int  # runs a side (the smaller side)
    verdict: str | None
    change_pct: float | None  # oriented: > 0 better
    detectable_pct: float | None  # smallest change these runs detect with 80% power (inconclusive)
    method: str = SEQUENTIAL_METHOD

    @property
    def decided(self) -> bool:
        return self.verdict in (REGRESSED, IMPROVED, UNCHANGED)


# A release prior as arrays: (s0_sq, d0); d0 = 0 means none (each comparison's own variance).
Prior = tuple[np.ndarray, np.ndarray]


def _trigamma_inverse(x: np.ndarray) -> np.ndarray:
    """y with trigamma(y) = x, elementwise (x > 0): Newton's method from limma's trigammaInverse."""
    y = np.where(x > 1e7, 1.0 / np.sqrt(x), 0.5 + 1.0 / x)
    for _ in range(50):
        tri = special.polygamma(1, y)
        step = tri * (1.0 - tri / x) / special.polygamma(2, y)
        y = y + step
        if float(np.max(-step / y)) < 1e-8:
            break
    return y


def release_prior(variances: np.ndarray, df: float) -> Prior:
    """The moderated-t prior of each release (last axis: its sides' log variances, each on ``df``
    degrees of freedom): :func:`ablate.backend.analysis.moderated.prior_variance`, vectorised over
    releases for the simulation (the test checks the two agree). ``d0`` 0 below ``MIN_SIDES``."""
    v = np.asarray(variances, dtype=float)
    k = v.shape[-1]
    if k < MIN_SIDES:
        return np.full(v.shape[:-1], np.nan), np.zeros(v.shape[:-1])
    e = np.log(v) - special.digamma(df / 2.0) + math.log(df / 2.0)
    excess = e.var(-1, ddof=1) - float(special.polygamma(1, df / 2.0))
    d0 = np.full(excess.shape, MAX_PRIOR_DF)
    spread = excess > float(special.polygamma(1, MAX_PRIOR_DF / 2.0))
    if spread.any():
        d0[spread] = np.minimum(2.0 * _trigamma_inverse(excess[spread]), MAX_PRIOR_DF)
    s0_sq = np.exp(e.mean(-1) + special.digamma(d0 / 2.0) - np.log(d0 / 2.0))
    return s0_sq, d0


def squeezed(
    variance: np.ndarray, df: np.ndarray | float, prior: Prior, guard_p: float = GUARD_P
) -> tuple[np.ndarray, np.ndarray]:
    """(moderated variance, df) elementwise: :func:`ablate.backend.analysis.moderated.squeeze`,
    guard included (a variance above the prior's beyond chance at ``guard_p`` keeps its own)."""
    s0_sq, d0 = prior
    var = np.asarray(variance, dtype=float)
    dfa = np.broadcast_to(np.asarray(df, dtype=float), var.shape)
    has = d0 > 0
    safe_s0 = np.where(has, s0_sq, 1.0)
    noisier = (var > safe_s0) & (special.fdtrc(dfa, np.where(has, d0, 1.0), var / safe_s0) < guard_p)
    own = ~has | noisier
    moderated = (d0 * safe_s0 + dfa * var) / (d0 + dfa)
    return np.where(own, var, moderated), np.where(own, dfa, d0 + dfa)


def pooled_log_t(
    contender_logs: np.ndarray,
    reference_logs: np.ndarray,
    session_var: float | np.ndarray = 0.0,
    prior: Prior | None = None,
    guard_p: float = GUARD_P,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(difference of log means, its standard error, degrees of freedom) over the last axis.

    ``prior``: the release's moderated-t prior (:func:`release_prior`); the comparison's pooled
    variance is shrunk toward it (:func:`squeezed`), which is what lets a look at 3 runs decide.
    ``session_var``: the variance of the log difference that comes from the session itself (days,
    nodes), which repeats within one session cannot see; it is added to the squared error here and
    nowhere else (0 until the between-session estimate is passed in).
    """
    nc, nr = contender_logs.shape[-1], reference_logs.shape[-1]
    est = contender_logs.mean(-1) - reference_logs.mean(-1)
    df0 = nc + nr - 2
    pooled = ((nc - 1) * contender_logs.var(-1, ddof=1) + (nr - 1) * reference_logs.var(-1, ddof=1)) / df0
    df = np.full(np.shape(est), float(df0))
    if prior is not None:
        pooled, df = squeezed(pooled, df, prior, guard_p)
    se = np.sqrt(pooled * (1.0 / nc + 1.0 / nr) + session_var)
    return est, se, df


def decide_codes(
    design: SequentialDesign, n: int, est: np.ndarray, se: np.ndarray, df: np.ndarray
) -> np.ndarray:
    """The decision at a look of ``n`` runs a side, per element: 1 improved, -1 regressed,
    2 unchanged, 0 runs on. ``est`` is oriented (> 0 better), in log units."""
    a, b = design.levels(n)
    est, se, df = np.asarray(est, float), np.asarray(se, float), np.asarray(df, float)
    threshold = math.log1p(design.threshold_pct / 100.0)
    margin = math.log1p(design.margin_pct / 100.0)
    codes = np.zeros(est.shape, dtype=int)
    if a > 0:
        crit = special.stdtrit(df, 1.0 - a / 2.0)
        changed = (np.abs(est) > crit * se) & (np.abs(est) >= threshold)
        codes = np.where(changed, np.where(est > 0, _IMPROVED, _REGRESSED), codes)
    if b > 0:
        half = special.stdtrit(df, 1.0 - b) * se
        same = (est + half < margin) & (est - half > -margin)
        codes = np.where((codes == _CONTINUE) & same, _UNCHANGED, codes)
    return codes


def detectable_pct(design: SequentialDesign, n: int, se: float, df: float) -> float:
    """Smallest change (%) a test at the last look's level finds with 80% power at this error."""
    a, _ = design.levels(n)
    a = a if a > 0 else design.alpha
    z = float(special.stdtrit(df, 1.0 - a / 2.0)) + float(special.stdtrit(df, DETECTABLE_POWER))
    shift = max(z * se, math.log1p(design.threshold_pct / 100.0))
    return 100.0 * math.expm1(shift)


def look(
    design: SequentialDesign,
    contender: Sequence[float],
    reference: Sequence[float],
    direction: Direction,
    *,
    session_var: float = 0.0,
    prior: tuple[float, float] | None = None,
) -> Look:
    """Decide one comparison from its positive values (``direction``: which way is better);
    ``prior``: the release's (s0_sq, d0) from :func:`study_prior`, None for the comparison's own
    variance.

    Uses the first ``n`` values of each side (``n`` the smaller count, capped at ``max``), so a side
    with a run more is judged on the runs both sides share in rounds."""
    c = np.asarray(list(contender), dtype=float)
    r = np.asarray(list(reference), dtype=float)
    n = min(c.size, r.size, design.max_n)
    if n < design.min_n or (c[:n] <= 0).any() or (r[:n] <= 0).any():
        return Look(n=n, verdict=None, change_pct=None, detectable_pct=None)
    sign = 1.0 if direction == "higher" else -1.0
    arrays = None if prior is None else (np.asarray(prior[0]), np.asarray(prior[1]))
    est, se, df = pooled_log_t(np.log(c[:n]), np.log(r[:n]), session_var, arrays, design.guard_p)
    oriented = sign * float(est)
    code = int(decide_codes(design, n, np.asarray(oriented), se, df))
    verdict = _NAMES.get(code)
    detectable = None
    if verdict is None and n >= design.max_n:
        verdict = INCONCLUSIVE
        detectable = detectable_pct(design, n, float(se), float(df))
    return Look(n=n, verdict=verdict, change_pct=100.0 * math.expm1(oriented), detectable_pct=detectable)


def study_prior(sides: Sequence[Sequence[float]], min_n: int) -> tuple[float, float] | None:
    """The prior of a study's sides (positive values each): from the first ``min_n`` runs of every
    side that has them, so the prior is fixed at the first look, before any stopping could select
    which sides run on; None when fewer than ``MIN_SIDES`` sides qualify or the pool shares nothing."""
    variances = []
    for values in sides:
        v = np.asarray(list(values)[:min_n], dtype=float)
        if v.size == min_n and (v > 0).all():
            var = float(np.log(v).var(ddof=1))
            if var > 0:
                variances.append(var)
    s0_sq, d0 = release_prior(np.asarray(variances), float(min_n - 1))
    if len(variances) < MIN_SIDES or float(d0) <= 0:
        return None
    return float(s0_sq), float(d0)


def simulate_release(
    design: SequentialDesign,
    cvs: Sequence[float],
    change: float,
    releases: int,
    rng: np.random.Generator,
    *,
    pool: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict codes, runs a side), each of shape (releases, len(cvs)): releases of ``len(cvs)``
    independent comparisons under log-normal noise of those CVs, each with a true oriented change
    ``change`` (0.05: 5% better); inconclusive ends are code 0 at ``max``. ``pool``: shrink toward
    the release's prior (from every side's first ``min`` runs), as the studies service does; without
    a prior (``pool`` False or fewer than ``MIN_SIDES`` sides) ``design.alone()`` decides, as there."""
    k, top = len(cvs), design.max_n
    sigma = np.sqrt(np.log1p(np.asarray(cvs, dtype=float) ** 2))[None, :, None]
    c = (math.log1p(change) + sigma * rng.standard_normal((releases, k, top))).reshape(-1, top)
    r = (sigma * rng.standard_normal((releases, k, top))).reshape(-1, top)
    prior: Prior | None = None
    if pool and 2 * k >= MIN_SIDES:
        variances = [x[:, : design.min_n].var(-1, ddof=1).reshape(releases, k) for x in (c, r)]
        s0_sq, d0 = release_prior(np.concatenate(variances, axis=1), design.min_n - 1)
        prior = (np.repeat(s0_sq, k), np.repeat(d0, k))
    else:
        design = design.alone()
    codes = np.zeros(releases * k, dtype=int)
    runs = np.full(releases * k, top)
    open_ = np.ones(releases * k, dtype=bool)
    for n in range(design.min_n, top + 1):
        idx = np.flatnonzero(open_)
        if idx.size == 0:
            break
        part = None if prior is None else (prior[0][idx], prior[1][idx])
        est, se, df = pooled_log_t(c[idx, :n], r[idx, :n], 0.0, part, design.guard_p)
        got = decide_codes(design, n, est, se, df)
        hit = idx[got != _CONTINUE]
        codes[hit] = got[got != _CONTINUE]
        runs[hit] = n
        open_[hit] = False
    return codes.reshape(releases, k), runs.reshape(releases, k)


def simulate(
    design: SequentialDesign,
    cv: float,
    change: float,
    trials: int,
    rng: np.random.Generator,
    *,
    cells: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict codes, runs a side) of ``trials`` comparisons at CV ``cv``, drawn as releases of
    ``cells`` comparisons that share a prior (``cells`` 1: each on its own variance)."""
    releases = -(-trials // cells)
    codes, runs = simulate_release(design, [cv] * cells, change, releases, rng)
    return codes.reshape(-1)[:trials], runs.reshape(-1)[:trials]
