"""The advisor's fitting machinery: a Gaussian-prior least-squares fit whose noise is a
scaled-inverse-chi-square update of a prior noise level, and that prior noise level estimated from
the repeats a cluster holds.

Pure: numbers in, frozen dataclasses out. Used by :mod:`ablate.backend.analysis.checkpointing`.

Why the noise is estimated (issue 27): with a fixed prior of 2% worth two observations, the 95%
prediction intervals of peak memory covered 86% of new runs when the runs really scattered 5%. The
run-to-run spread of the same cell (same workload, release, factors and k) measures that scatter
directly, without any model: pooled over the cells of a cluster it is the prior of the fit's noise,
worth as many observations as its degrees of freedom (benchmarks/stats_simulation.py, table advisor).
With nothing to pool, the 2% guess is worth a quarter of an observation: the fit's residuals decide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

# Without repeats to pool, the peak-memory noise prior: 2% of the peak (the CPU runs of docs/advisor.md
# scattered 1-2%) worth a quarter of an observation, so a fit's own residuals outweigh it at once. Worth
# two, it held the estimate near 2% where runs scattered 5% and the 95% intervals covered 89.8-92.2%
# (stats_simulation.py, table advisor); worth a quarter they cover 93.5-97.2% at 2% and at 5% noise.
NOISE_REL = 0.02
NOISE_DOF = 0.25
TIME_NOISE = 0.05  # prior noise of log step time (5 %), worth TIME_NOISE_DOF observations
TIME_NOISE_DOF = 2.0
# With this many degrees of freedom of repeats the pooled spread stands alone: a 2% prior worth 2 runs
# held the estimate at 4.6% where the runs scattered 5% with 8 df pooled, and the intervals covered 92%.
MIN_POOLED_DOF = 4


@dataclass(frozen=True)
class NoiseEstimate:
    """The relative sd of one run (``rel_sd``; the sd of its log) and the observations it is worth
    (``dof``: the prior's plus the pooled repeats' degrees of freedom), with what it came from."""

    rel_sd: float
    dof: float
    cells: int = 0  # cells with 2+ runs that were pooled
    runs: int = 0  # their runs
    prior_rel: float = NOISE_REL
    prior_dof: float = NOISE_DOF

    @property
    def pooled_dof(self) -> float:
        return self.dof - self.prior_dof

    def describe(self, what: str) -> str:
        """One line for the advice's notes, e.g. "peak-memory noise 4.8% per run, from ..."."""
        if not self.cells:
            return (
                f"{what} noise {self.prior_rel:.1%} per run assumed (no repeated runs of one cell of "
                f"another workload on the cluster to estimate it from; worth {self.prior_dof:g} runs, the "
                "fit's residuals update it)"
            )
        pooled = (
            f"{what} noise {self.rel_sd:.1%} per run, from the spread of repeats: {self.runs} runs in "
            f"{self.cells} cells of other workloads ({self.pooled_dof:g} degrees of freedom)"
        )
        if self.prior_dof:
            return pooled + f", with the {self.prior_rel:.1%} assumed worth {self.prior_dof:g} (few repeats)"
        return pooled


def pooled_noise(
    cells: Iterable[Sequence[float]], *, prior_rel: float = NOISE_REL, prior_dof: float = NOISE_DOF
) -> NoiseEstimate:
    """The run-to-run noise of ``cells`` (each the values of repeated runs of one cell): the pooled
    variance of log values, ``sum (n - 1) s^2 / sum (n - 1)``, on its degrees of freedom. Below
    :data:`MIN_POOLED_DOF` it is shrunk toward ``prior_rel`` worth ``prior_dof`` observations (a
    scaled-inverse-chi-square update); with nothing to pool it is that prior. Cells with fewer than
    two positive values add nothing."""
    ss, df, used, runs = 0.0, 0, 0, 0
    for cell in cells:
        logs = [math.log(v) for v in cell if v is not None and v > 0 and math.isfinite(v)]
        if len(logs) < 2:
            continue
        mean = math.fsum(logs) / len(logs)
        ss += math.fsum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        used += 1
        runs += len(logs)
    if df < MIN_POOLED_DOF:
        var = (prior_dof * prior_rel**2 + ss) / (prior_dof + df)
        return NoiseEstimate(math.sqrt(var), prior_dof + df, used, runs, prior_rel, prior_dof)
    return NoiseEstimate(math.sqrt(ss / df), float(df), used, runs, prior_rel, 0.0)


@dataclass(frozen=True)
class Noise:
    """The noise priors of the advisor's two fits: peak memory (relative) and log step time."""

    memory: NoiseEstimate = NoiseEstimate(NOISE_REL, NOISE_DOF)
    time: NoiseEstimate = NoiseEstimate(
        TIME_NOISE, TIME_NOISE_DOF, prior_rel=TIME_NOISE, prior_dof=TIME_NOISE_DOF
    )


@dataclass(frozen=True)
class LinearFit:
    """A Gaussian-prior least-squares fit: posterior mean and covariance, the noise sd and its dof."""

    names: tuple[str, ...]
    mean: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    sigma: float
    dof: float
    n: int

    def array_mean(self) -> np.ndarray:
        return np.asarray(self.mean, dtype=float)

    def array_cov(self) -> np.ndarray:
        return np.asarray(self.cov, dtype=float)


def fit_linear(
    X: np.ndarray,
    y: np.ndarray,
    prior_mean: np.ndarray,
    prior_cov: np.ndarray,
    *,
    noise_sd: float,
    noise_dof: float = NOISE_DOF,
    names: Sequence[str] = (),
) -> LinearFit:
    """Least squares regularised towards ``prior_mean`` (a Gaussian prior of covariance
    ``prior_cov``), with the noise estimated from the residuals shrunk towards ``noise_sd`` (a
    scaled-inverse-chi-square prior worth ``noise_dof`` observations). Without data the fit is the
    prior."""
    mu0 = np.asarray(prior_mean, dtype=float)
    X = np.atleast_2d(np.asarray(X, dtype=float)).reshape(-1, len(mu0))
    y = np.asarray(y, dtype=float).reshape(-1)
    cov0 = np.asarray(prior_cov, dtype=float)
    prec0 = np.linalg.inv(cov0)
    n = len(y)
    xtx = X.T @ X  # (p x p): the iterations never form an n x n matrix
    sigma = noise_sd
    mean, cov = mu0, cov0
    dof = math.inf  # without data the prior sds are the whole story: normal quantiles
    for _ in range(50 if n else 1):
        prec = prec0 + xtx / sigma**2
        cov = np.linalg.inv(prec)
        mean = cov @ (prec0 @ mu0 + X.T @ y / sigma**2)
        if not n:
            break
        resid = y - X @ mean
        p_eff = float(np.trace(cov @ xtx)) / sigma**2  # parameters the data really determine
        dof = max(noise_dof + n - p_eff, 1.0)
        new = math.sqrt((noise_dof * noise_sd**2 + float(resid @ resid)) / dof)
        if abs(new - sigma) <= 1e-9 * max(sigma, 1e-12):
            sigma = new
            break
        sigma = new
    return LinearFit(
        names=tuple(names),
        mean=tuple(float(v) for v in mean),
        cov=tuple(tuple(float(v) for v in row) for row in cov),
        sigma=float(sigma),
        dof=float(dof),
        n=n,
    )


def t_quantile(level: float, dof: float) -> float:
    """The two-sided ``level`` quantile of Student's t on ``dof`` (normal when infinite)."""
    q = 0.5 + level / 2.0
    return float(stats.norm.ppf(q) if math.isinf(dof) else stats.t.ppf(q, dof))
