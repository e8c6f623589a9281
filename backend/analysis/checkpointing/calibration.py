"""Calibration of the checkpointing advisor's model with measured runs: peak memory as a linear
model in the prior's per-layer bytes, log step time as linear in k (see the package's docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ablate.backend.analysis.bayes_fit import LinearFit, Noise, NoiseEstimate, fit_linear, t_quantile
from ablate.backend.analysis.checkpointing.shape import MemoryPrior, full_layers
from ablate.backend.analysis.stats import exp_shown

DEFAULT_LEVEL = 0.95

# Prior uncertainties (relative sd). Per-layer coefficients: the block of a real framework may
# store more or less than the textbook count (fused kernels, fp32 norms, allocator rounding); on
# the torch-llm runner on CPU the fitted multipliers were 1.01-1.07 (docs/advisor.md), but other
# frameworks' blocks are not that one, so the prior stays wide.
PSI_SD = 0.5
STATIC_SD = 0.1  # weights/grads/optimizer: exact counts, but temporaries of the optimizer step vary
GROUP_SD = 0.05  # release/factor groups move the intercept by a few percent
POOL_SPREAD_SD = 0.15  # how much a similar workload's coefficients may differ from this one's
TIME_GROUP_SD = 0.5  # compile, ACCL, a release: step time moves a lot between groups
LAMBDA_SD = 0.5  # relative sd of the recompute cost per layer


# Measurements ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """One measured run: its k, its group (release x factors other than ckpt_opt) and what it measured."""

    run_id: int
    ckpt_layers: int
    group: str = ""
    peak_memory_gib: float | None = None
    step_time_s: float | None = None


@dataclass(frozen=True)
class SimilarWorkload:
    """Runs of another workload whose shape is similar (:func:`similar_shapes`), with its own prior."""

    name: str
    prior: MemoryPrior
    observations: tuple[Observation, ...]


# Memory ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerCoefficients:
    """Multipliers of the prior's per-layer bytes (psi_A, psi_C), with their covariance."""

    mean: tuple[float, float] = (1.0, 1.0)
    cov: tuple[tuple[float, float], tuple[float, float]] = ((PSI_SD**2, 0.0), (0.0, PSI_SD**2))
    run_ids: tuple[int, ...] = ()
    workloads: tuple[str, ...] = ()


def pool_layer_coefficients(
    similar: Sequence[SimilarWorkload], noise: NoiseEstimate | None = None
) -> LayerCoefficients:
    """What runs of similar workloads say about psi_A and psi_C: one fit over all of them, each with
    its own intercept, the two multipliers shared; the spread between workloads is added to their
    covariance so that they inform, not dictate, the target's fit."""
    used = [w for w in similar if any(o.peak_memory_gib is not None for o in w.observations)]
    if not used:
        return LayerCoefficients()
    rows, ys, mu, sd = [], [], [], []
    n_w = len(used)
    for i, w in enumerate(used):
        mu.append(w.prior.fixed_gib)
        sd.append(_intercept_sd(w.prior))
        for o in w.observations:
            if o.peak_memory_gib is None:
                continue
            x = np.zeros(n_w + 2)
            x[i] = 1.0
            x[n_w] = w.prior.layer_activation_gib * full_layers(o.ckpt_layers, w.prior.n_layers)
            x[n_w + 1] = w.prior.layer_checkpointed_gib * o.ckpt_layers
            rows.append(x)
            ys.append(o.peak_memory_gib)
    noise = noise or Noise().memory
    cov0 = np.diag(np.array([*sd, PSI_SD, PSI_SD]) ** 2)
    fit = fit_linear(
        np.array(rows), np.array(ys), np.array([*mu, 1.0, 1.0]), cov0,
        noise_sd=noise.rel_sd * float(np.mean(ys)), noise_dof=noise.dof,
    )  # fmt: skip
    m, c = fit.array_mean()[n_w:], fit.array_cov()[n_w:, n_w:] + np.eye(2) * POOL_SPREAD_SD**2
    ids = tuple(sorted(o.run_id for w in used for o in w.observations if o.peak_memory_gib is not None))
    return LayerCoefficients(
        mean=(float(m[0]), float(m[1])),
        cov=((float(c[0, 0]), float(c[0, 1])), (float(c[1, 0]), float(c[1, 1]))),
        run_ids=ids,
        workloads=tuple(w.name for w in used),
    )


def _intercept_sd(prior: MemoryPrior) -> float:
    return math.hypot(prior.baseline_sd_gib, STATIC_SD * (prior.static_gib + prior.head_gib))


@dataclass(frozen=True)
class MemoryModel:
    """The calibrated peak-memory model of one workload on one cluster."""

    prior: MemoryPrior
    fit: LinearFit
    groups: tuple[str, ...]
    target_group: str
    run_ids: tuple[int, ...]
    coefficients: LayerCoefficients

    def _x(self, k: int) -> np.ndarray:
        x = np.zeros(len(self.fit.mean))
        x[0] = 1.0
        if self.target_group in self.groups:
            x[1 + self.groups.index(self.target_group)] = 1.0
        x[-2] = self.prior.layer_activation_gib * full_layers(k, self.prior.n_layers)
        x[-1] = self.prior.layer_checkpointed_gib * k
        return x

    def predict(self, k: int, level: float = DEFAULT_LEVEL) -> tuple[float, float, float]:
        """(predicted peak, low, high) in GiB for one new run at ``k``: a prediction interval."""
        x = self._x(k)
        mean = float(x @ self.fit.array_mean())
        var = float(x @ self.fit.array_cov() @ x) + self.fit.sigma**2
        if self.target_group not in self.groups:
            var += (GROUP_SD * self.prior.fixed_gib) ** 2  # a group without runs: its offset unknown
        half = t_quantile(level, self.fit.dof) * math.sqrt(var)
        return mean, max(mean - half, 0.0), mean + half


def fit_memory(
    prior: MemoryPrior,
    observations: Sequence[Observation],
    *,
    target_group: str = "",
    coefficients: LayerCoefficients | None = None,
    noise: NoiseEstimate | None = None,
) -> MemoryModel:
    """Calibrate ``prior`` with the peak memory of measured runs (any k, any group); ``noise`` is the
    prior of one run's relative noise (default: 2% worth a quarter of a run)."""
    noise = noise or Noise().memory
    coefficients = coefficients or LayerCoefficients()
    obs = [o for o in observations if o.peak_memory_gib is not None]
    groups = tuple(sorted({o.group for o in obs}))
    p = 1 + len(groups) + 2
    mu = np.zeros(p)
    mu[0] = prior.fixed_gib
    mu[-2:] = coefficients.mean
    cov0 = np.zeros((p, p))
    cov0[0, 0] = _intercept_sd(prior) ** 2
    for i in range(len(groups)):
        cov0[1 + i, 1 + i] = (GROUP_SD * prior.fixed_gib) ** 2 + 1e-6
    cov0[-2:, -2:] = np.asarray(coefficients.cov)
    X = np.zeros((len(obs), p))
    for r, o in enumerate(obs):
        X[r, 0] = 1.0
        X[r, 1 + groups.index(o.group)] = 1.0
        X[r, -2] = prior.layer_activation_gib * full_layers(o.ckpt_layers, prior.n_layers)
        X[r, -1] = prior.layer_checkpointed_gib * o.ckpt_layers
    y = np.array([o.peak_memory_gib for o in obs], dtype=float)
    scale = float(np.mean(y)) if len(y) else prior.peak_gib(0)
    fit = fit_linear(
        X, y, mu, cov0, noise_sd=noise.rel_sd * max(scale, 0.01), noise_dof=noise.dof,
        names=("intercept", *(f"group:{g}" for g in groups), "psi_activation", "psi_checkpointed"),
    )  # fmt: skip
    return MemoryModel(
        prior=prior,
        fit=fit,
        groups=groups,
        target_group=target_group,
        run_ids=tuple(sorted(o.run_id for o in obs)),
        coefficients=coefficients,
    )


# Step time ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeModel:
    """log step time = gamma + delta_g + lambda * k; the throughput ratio at k is exp(-lambda * k)."""

    fit: LinearFit
    groups: tuple[str, ...]
    run_ids: tuple[int, ...]
    prior_lambda: float

    @property
    def lam(self) -> float:
        return self.fit.mean[-1]

    @property
    def lam_sd(self) -> float:
        return math.sqrt(self.fit.cov[-1][-1])

    def ratio(self, k: int, level: float = DEFAULT_LEVEL) -> tuple[float, float, float]:
        """(throughput at k over throughput at k = 0, low, high): an interval of the expected ratio."""
        half = t_quantile(level, self.fit.dof) * self.lam_sd * k
        return exp_shown(-self.lam * k), exp_shown(-self.lam * k - half), exp_shown(-self.lam * k + half)


def fit_step_time(
    prior: MemoryPrior, observations: Sequence[Observation], noise: NoiseEstimate | None = None
) -> TimeModel:
    """Calibrate the recompute cost per layer from measured step times (per-group intercepts);
    ``noise`` is the prior of the noise of log step time (default: 5% worth two runs)."""
    noise = noise or Noise().time
    obs = [o for o in observations if o.step_time_s is not None and o.step_time_s > 0]
    groups = tuple(sorted({o.group for o in obs}))
    lam0 = math.log1p(prior.recompute_fraction * prior.n_layers) / prior.n_layers
    p = len(groups) + 1
    mu = np.zeros(p)
    sd = np.full(p, 10.0)  # intercepts (log seconds): the data decide
    mu[-1], sd[-1] = lam0, LAMBDA_SD * lam0 + 1e-6
    X = np.zeros((len(obs), p))
    for r, o in enumerate(obs):
        X[r, groups.index(o.group)] = 1.0
        X[r, -1] = o.ckpt_layers
    y = np.log([float(o.step_time_s or 0.0) for o in obs]) if obs else np.zeros(0)
    for i, g in enumerate(groups):
        mu[i] = float(np.mean([v for o, v in zip(obs, y, strict=True) if o.group == g]))
    names = (*(f"group:{g}" for g in groups), "lambda")
    fit = fit_linear(X, y, mu, np.diag(sd**2), noise_sd=noise.rel_sd, noise_dof=noise.dof, names=names)
    return TimeModel(fit=fit, groups=groups, run_ids=tuple(sorted(o.run_id for o in obs)), prior_lambda=lam0)
