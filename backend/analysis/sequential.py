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
increment spent since the previous look. By the union bound the chance of any false "changed"
over all looks is then at most ``alpha`` (and of a false "unchanged" at most ``beta``), whatever
the correlation between looks and whatever the noise level. ``alpha = 0.05`` in all (the level of
the release verdict's single test), spent with ``rho = 1.25``: the first look (which holds the
shares of 1..min) gets the largest single share, later looks a little more each, since at a low
noise level the 3% threshold already keeps a late look from a false change.
``benchmarks/adaptive_simulation.py`` measures the real rates (docs/statistics.md, "Adaptive
repeats"): 1.2% false changes at CV 2% and 2.7% at CV 5% where nothing changed.

The test is Student's t on log values with the variance pooled over both sides: two rungs measured
in one session on one cluster share a noise level, and the pooled estimate's ``2n - 2`` degrees of
freedom (Welch's are fewer, and unstable at 3 a side) are what lets a look at 3 runs decide.
The one place a between-session variance term enters is :func:`pooled_log_t`'s ``session_var``.

Numbers in, dataclasses out; vectorised over trials so the simulation runs the same code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from ablate.backend.domain.metrics import Direction

SEQUENTIAL_METHOD = (
    "group-sequential student-t on log values (pooled variance); alpha 0.05 spent as "
    "alpha*(n/max)^1.25 and beta 0.05 as beta*(n/max)^0.5 over the looks (union bound)"
)
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
    alpha: float = 0.05  # spent on "regressed"/"improved" over all looks: bounds a false change
    beta: float = 0.05  # spent on "unchanged" over all looks
    # alpha's shape, chosen by the simulation's --sweep: 1.25 keeps false changes at CV 2% at 1.2%
    # (0.5, spending early: 1.8%; 2.0: 0.9% but 0.26 more runs a side for a 5% change).
    alpha_rho: float = 1.25
    beta_rho: float = 0.5  # < 1 spends early: an unchanged comparison stops sooner
    threshold_pct: float = 3.0  # the smallest change called regressed/improved (as regression.py)
    margin_pct: float = 4.5  # "unchanged" means inside +-margin (below the 5% change it must not hide)

    def __post_init__(self) -> None:
        if not 2 <= self.min_n <= self.max_n:
            raise ValueError(f"need 2 <= min ({self.min_n}) <= max ({self.max_n})")
        if not (0 < self.alpha < 1 and 0 < self.beta < 1):
            raise ValueError(f"alpha ({self.alpha}) and beta ({self.beta}) must lie in (0, 1)")
        if not (self.alpha_rho > 0 and self.beta_rho > 0):
            raise ValueError(f"alpha_rho ({self.alpha_rho}) and beta_rho ({self.beta_rho}) must be above 0")

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


def pooled_log_t(
    contender_logs: np.ndarray, reference_logs: np.ndarray, session_var: float | np.ndarray = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(difference of log means, its standard error, degrees of freedom) over the last axis.

    ``session_var``: the variance of the log difference that comes from the session itself (days,
    nodes), which repeats within one session cannot see; it is added to the squared error here and
    nowhere else (0 until the between-session estimate is passed in).
    """
    nc, nr = contender_logs.shape[-1], reference_logs.shape[-1]
    est = contender_logs.mean(-1) - reference_logs.mean(-1)
    df = nc + nr - 2
    pooled = ((nc - 1) * contender_logs.var(-1, ddof=1) + (nr - 1) * reference_logs.var(-1, ddof=1)) / df
    se = np.sqrt(pooled * (1.0 / nc + 1.0 / nr) + session_var)
    return est, se, np.full(np.shape(est), float(df))


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
) -> Look:
    """Decide one comparison from its positive values (``direction``: which way is better).

    Uses the first ``n`` values of each side (``n`` the smaller count, capped at ``max``), so a side
    with a run more is judged on the runs both sides share in rounds."""
    c = np.asarray(list(contender), dtype=float)
    r = np.asarray(list(reference), dtype=float)
    n = min(c.size, r.size, design.max_n)
    if n < design.min_n or (c[:n] <= 0).any() or (r[:n] <= 0).any():
        return Look(n=n, verdict=None, change_pct=None, detectable_pct=None)
    sign = 1.0 if direction == "higher" else -1.0
    est, se, df = pooled_log_t(np.log(c[:n]), np.log(r[:n]), session_var)
    oriented = sign * float(est)
    code = int(decide_codes(design, n, np.asarray(oriented), se, df))
    verdict = _NAMES.get(code)
    detectable = None
    if verdict is None and n >= design.max_n:
        verdict = INCONCLUSIVE
        detectable = detectable_pct(design, n, float(se), float(df))
    return Look(n=n, verdict=verdict, change_pct=100.0 * math.expm1(oriented), detectable_pct=detectable)


def simulate(
    design: SequentialDesign, cv: float, change: float, trials: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict codes, runs a side) of ``trials`` comparisons under log-normal noise of ``cv`` with
    a true oriented change ``change`` (0.05: 5% better); inconclusive ends are code 0 at ``max``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    c = rng.normal(math.log1p(change), sigma, (trials, design.max_n))
    r = rng.normal(0.0, sigma, (trials, design.max_n))
    codes = np.zeros(trials, dtype=int)
    runs = np.full(trials, design.max_n)
    open_ = np.ones(trials, dtype=bool)
    for n in range(design.min_n, design.max_n + 1):
        idx = np.flatnonzero(open_)
        if idx.size == 0:
            break
        est, se, df = pooled_log_t(c[idx, :n], r[idx, :n])
        got = decide_codes(design, n, est, se, df)
        hit = idx[got != _CONTINUE]
        codes[hit] = got[got != _CONTINUE]
        runs[hit] = n
        open_[hit] = False
    return codes, runs
