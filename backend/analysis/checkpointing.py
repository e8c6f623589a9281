"""The checkpointing advisor's model: peak memory and step time as functions of k, the number of
activation-checkpointed layers, and the smallest k whose predicted peak fits a memory budget.

Pure: shapes and measured numbers in, frozen dataclasses out. docs/advisor.md explains the formula,
its assumptions and its sources; in short:

* **Prior** (from the shape only). Weights, gradients and optimizer state by precision and ZeRO
  stage over the data-parallel degree (the mixed-precision Adam accounting of the ZeRO paper and
  Megatron-LM's theoretical memory estimate); activations per layer per micro-batch
  ``s*b*h*(34 + 5*a*s/h)`` bytes in 16-bit (Korthikanti et al. 2022, Table 2), generalised to the
  FFN width, gated MLPs and grouped-query attention, without the ``5*a*s/h`` score term under
  flash/SDPA attention, divided by tensor parallel; a checkpointed layer keeps its input only
  (``2*s*b*h`` bytes in 16-bit), while the one being recomputed in backward holds its activations
  again, so at least one layer's full activations are always counted (:func:`full_layers`).
* **Calibration**. ``peak(k) = alpha + delta_g + psi_A * A * max(L-k, 1) + psi_C * C * k`` is a linear
  model in (alpha, delta_g, psi_A, psi_C) with A, C the prior's per-layer bytes and delta_g an offset
  per group of runs (release x factors other than ckpt_opt). It is fitted by regularised least
  squares whose regulariser is the prior (a Gaussian prior: the fit starts at, and without data stays
  at, the analytical model); the noise is a scaled-inverse-chi-square update of a prior noise level,
  and prediction intervals are Student-t. Runs of other workloads of similar shape first update the
  prior of psi_A and psi_C.
* **Step time**. ``log T(k) = gamma + delta_g + lambda * k`` (each checkpointed layer adds one
  recomputed forward, a fixed fraction of the step), the prior of lambda from the FLOPs of one
  layer's forward against the whole step; the throughput ratio against k = 0 is ``exp(-lambda*k)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ablate.backend.analysis.bayes_fit import (
    LinearFit,
    Noise,
    NoiseEstimate,
    fit_linear,
    pooled_noise,
    t_quantile,
)
from ablate.backend.analysis.stats import exp_shown

__all__ = ["LinearFit", "Noise", "NoiseEstimate", "fit_linear", "pooled_noise"]

GIB = float(2**30)
DEFAULT_UTILISATION = 0.92
DEFAULT_LEVEL = 0.95
BASIS_MEASURED = "measured"
BASIS_SIMILAR = "similar workloads"
BASIS_SHAPE = "model shape only"

ATTENTION_KINDS = ("eager", "flash", "sdpa")
_ACT_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4}

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


@dataclass(frozen=True)
class ModelShape:
    """What the prior needs to know about a training job; one device's view of it."""

    n_layers: int
    hidden: int
    n_heads: int
    seq_len: int
    micro_batch: int
    vocab_size: int
    ffn_hidden: int | None = None  # None: 4 * hidden
    gated_mlp: bool = False  # SwiGLU-style: three FFN matrices, four FFN-wide activations
    n_kv_heads: int | None = None  # None: n_heads
    tie_embeddings: bool = False
    precision: str = "bf16"  # activation dtype: bf16 | fp16 | fp32
    weights_fp32: bool = False  # autocast keeps fp32 weights and gradients (torch-llm does)
    attention: str = "eager"  # eager stores the score matrix; flash and sdpa do not
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    zero_stage: int = 0

    def problems(self) -> list[str]:
        out = []
        for name in ("n_layers", "hidden", "n_heads", "seq_len", "micro_batch", "vocab_size"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.precision.lower() not in _ACT_BYTES:
            out.append(f"unknown precision {self.precision!r} (bf16, fp16, fp32)")
        if self.attention not in ATTENTION_KINDS:
            out.append(f"unknown attention kind {self.attention!r} ({', '.join(ATTENTION_KINDS)})")
        if not 0 <= self.zero_stage <= 3:
            out.append(f"zero_stage must be 0..3, got {self.zero_stage}")
        return out

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def act_bytes(self) -> int:
        return _ACT_BYTES.get(self.precision.lower(), 2)

    @property
    def layer_params(self) -> int:
        h, kv = self.hidden, self.kv_heads * (self.hidden // self.n_heads)
        attn = 2 * h * h + 2 * h * kv
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn
        return attn + mlp + 2 * h  # two norms

    @property
    def n_params(self) -> int:
        embed = self.vocab_size * self.hidden
        return self.n_layers * self.layer_params + embed * (1 if self.tie_embeddings else 2) + self.hidden


def full_layers(k: int, n_layers: int) -> int:
    """Layers whose full activations are held at the peak: the L - k not checkpointed, but never
    fewer than one, because during backward the checkpointed layer being recomputed holds its full
    activations again. So checkpointing the last layer saves (almost) nothing: k = L - 1 and k = L
    peak alike, as measured (docs/advisor.md)."""
    return max(n_layers - k, 1)


@dataclass(frozen=True)
class MemoryPrior:
    """The analytical estimate, in GiB per device; ``peak(k) = fixed + A*max(L-k, 1) + C*k``."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    head_gib: float  # logits, their fp32 copy for the loss and its gradient; embedding output
    baseline_gib: float  # what the process holds before the model (runtime, allocator)
    baseline_sd_gib: float
    layer_activation_gib: float  # A: one layer that keeps its activations
    layer_checkpointed_gib: float  # C: one checkpointed layer (its input)
    n_layers: int
    recompute_fraction: float  # one layer's forward FLOPs over the whole step's (forward + backward)

    @property
    def static_gib(self) -> float:
        return self.weights_gib + self.gradients_gib + self.optimizer_gib

    @property
    def fixed_gib(self) -> float:
        return self.baseline_gib + self.static_gib + self.head_gib

    def peak_gib(self, k: int) -> float:
        full = full_layers(k, self.n_layers)
        return self.fixed_gib + self.layer_activation_gib * full + self.layer_checkpointed_gib * k


def layer_activation_bytes(shape: ModelShape) -> float:
    """Bytes one non-checkpointed layer stores for backward, per device.

    Korthikanti et al. (2022), Table 2: ``s*b*h*(34 + 5*a*s/h)`` in 16-bit. Of the 34: 11 attention
    (QKV input 2, Q and K 4, V 2, output-projection input 2, dropout mask 1), 4 for two layer norms,
    19 for the MLP (input 2, two 4h-wide tensors 16, dropout mask 1). Generalised here: the 16 scales
    with ffn/4h and doubles for a gated MLP (gate, up, activation, product); K and V shrink with
    grouped-query attention; everything scales with the activation dtype; the score term (softmax
    output, its dropout mask and output) is dropped for flash/SDPA attention; all of it is divided by
    tensor parallel (sequence parallelism assumed, as Megatron's estimate does).
    """
    s, b, h, a = shape.seq_len, shape.micro_batch, shape.hidden, shape.n_heads
    kv_frac = shape.kv_heads / shape.n_heads
    attention = 11.0 - 4.0 * (1.0 - kv_frac)
    mlp = 3.0 + 16.0 * (shape.ffn / (4.0 * h)) * (2.0 if shape.gated_mlp else 1.0)
    per_sbh = attention + 4.0 + mlp
    if shape.attention == "eager":
        per_sbh += 5.0 * a * s / h
    scale = shape.act_bytes / 2.0
    return s * b * h * per_sbh * scale / shape.tensor_parallel


def checkpointed_layer_bytes(shape: ModelShape) -> float:
    """A checkpointed layer keeps only its input: ``2*s*b*h`` bytes in 16-bit, divided by tensor parallel."""
    return shape.seq_len * shape.micro_batch * shape.hidden * shape.act_bytes / shape.tensor_parallel


def memory_prior(
    shape: ModelShape, *, baseline_gib: float = 0.0, baseline_sd_gib: float = 0.5
) -> MemoryPrior:
    """The analytical estimate for ``shape`` (see :func:`layer_activation_bytes` for the activations).

    Static state per parameter: mixed precision keeps 16-bit weights and gradients plus fp32 master
    weights, momentum and variance (2 + 2 + 12 bytes, the ZeRO paper's K = 12); fp32 training or
    autocast over fp32 weights keeps 4 + 4 + 8. ZeRO stage >= 1 shards the optimizer state over the
    data-parallel degree, >= 2 the gradients, 3 the weights. Tensor and pipeline parallel split the
    parameters; a pipeline's first stage holds ``pp`` micro-batches of ``L/pp`` layers in flight
    (1F1B), so its activations are those of L layers.
    """
    if shape.weights_fp32 or shape.act_bytes == 4:
        w_b, g_b, o_b = 4.0, 4.0, 8.0
    else:
        w_b, g_b, o_b = 2.0, 2.0, 12.0
    dp = max(1, shape.data_parallel)
    params = shape.n_params / (shape.tensor_parallel * shape.pipeline_parallel)
    weights = params * w_b / (dp if shape.zero_stage >= 3 else 1)
    grads = params * g_b / (dp if shape.zero_stage >= 2 else 1)
    optim = params * o_b / (dp if shape.zero_stage >= 1 else 1)
    s, b = shape.seq_len, shape.micro_batch
    # Logits in the activation dtype, their fp32 copy for the loss, and the gradient of that copy.
    head = s * b * shape.vocab_size * (shape.act_bytes + 4 + 4) / shape.tensor_parallel
    head += 2 * s * b * shape.hidden * shape.act_bytes / shape.tensor_parallel  # embedding out, final norm
    flops_layer = 2.0 * shape.layer_params + 4.0 * s * shape.hidden  # forward, per token
    flops_head = 2.0 * shape.vocab_size * shape.hidden
    recompute = flops_layer / (3.0 * (shape.n_layers * flops_layer + flops_head))
    return MemoryPrior(
        weights_gib=weights / GIB,
        gradients_gib=grads / GIB,
        optimizer_gib=optim / GIB,
        head_gib=head / GIB,
        baseline_gib=baseline_gib,
        baseline_sd_gib=baseline_sd_gib,
        layer_activation_gib=layer_activation_bytes(shape) / GIB,
        layer_checkpointed_gib=checkpointed_layer_bytes(shape) / GIB,
        n_layers=shape.n_layers,
        recompute_fraction=recompute,
    )


def similar_shapes(a: ModelShape, b: ModelShape, *, max_ratio: float = 4.0) -> bool:
    """Whether runs of ``b`` may inform the per-layer coefficients of ``a``: the same kind of block
    (precision, weight dtype, attention kind, gated MLP) and per-layer activations within a factor."""
    if (a.precision.lower(), a.weights_fp32, a.attention, a.gated_mlp) != (
        b.precision.lower(),
        b.weights_fp32,
        b.attention,
        b.gated_mlp,
    ):
        return False
    ratio = layer_activation_bytes(a) / layer_activation_bytes(b)
    return 1.0 / max_ratio <= ratio <= max_ratio


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
    prior of one run's relative noise (default: 2% worth two runs)."""
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


# Recommendation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KPrediction:
    ckpt_layers: int
    peak_memory_gib: float
    low_gib: float
    high_gib: float
    fits: bool
    throughput_ratio: float
    throughput_ratio_low: float
    throughput_ratio_high: float
    measured_peak_gib: tuple[float, ...] = ()
    measured_step_time_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class Advice:
    n_layers: int
    level: float
    device_memory_gib: float
    utilisation: float
    memory_budget_gib: float
    recommended_ckpt_layers: int | None  # None: not even k = L fits
    fits: bool
    shortfall_gib: float | None  # how far k = L's upper bound is above the budget, when nothing fits
    chosen: KPrediction  # the recommended k, or k = L when nothing fits
    basis: str
    memory_run_ids: tuple[int, ...]
    time_run_ids: tuple[int, ...]
    similar_run_ids: tuple[int, ...]
    similar_workloads: tuple[str, ...]
    table: tuple[KPrediction, ...]
    prior: MemoryPrior
    memory_fit: LinearFit
    time_fit: LinearFit
    message: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    noise: Noise = field(default_factory=Noise)


def _k_prediction(
    k: int, memory: MemoryModel, time: TimeModel, observations: Sequence[Observation], budget: float
) -> KPrediction:
    peak, lo, hi = memory.predict(k, DEFAULT_LEVEL)
    r, r_lo, r_hi = time.ratio(k, DEFAULT_LEVEL)
    at_k = [o for o in observations if o.ckpt_layers == k]
    return KPrediction(
        ckpt_layers=k,
        peak_memory_gib=peak,
        low_gib=lo,
        high_gib=hi,
        fits=hi <= budget,
        throughput_ratio=r,
        throughput_ratio_low=r_lo,
        throughput_ratio_high=r_hi,
        measured_peak_gib=tuple(o.peak_memory_gib for o in at_k if o.peak_memory_gib is not None),
        measured_step_time_s=tuple(o.step_time_s for o in at_k if o.step_time_s is not None),
    )


def _message(
    n_layers: int, fitting: KPrediction | None, chosen: KPrediction, budget: float, shortfall: float | None
) -> str:
    if fitting is not None and fitting.ckpt_layers == 0:
        return (
            f"no checkpointing needed: predicted peak {fitting.peak_memory_gib:.2f} GiB (up to "
            f"{fitting.high_gib:.2f}) within the {budget:.2f} GiB budget, all {n_layers} layers kept"
        )
    if fitting is not None:
        cost = (1 - fitting.throughput_ratio) * 100
        return (
            f"checkpoint {fitting.ckpt_layers} of {n_layers} layers: predicted peak "
            f"{fitting.peak_memory_gib:.2f} GiB (up to {fitting.high_gib:.2f}) within the "
            f"{budget:.2f} GiB budget, about {cost:.1f}% less throughput than k = 0"
        )
    return (
        f"does not fit: even with all {n_layers} layers checkpointed the predicted peak is "
        f"{chosen.peak_memory_gib:.2f} GiB (up to {chosen.high_gib:.2f}), {shortfall:.2f} GiB over "
        f"the {budget:.2f} GiB budget"
    )


def recommend(
    prior: MemoryPrior,
    observations: Sequence[Observation],
    *,
    device_memory_gib: float,
    utilisation: float = DEFAULT_UTILISATION,
    target_group: str = "",
    similar: Sequence[SimilarWorkload] = (),
    noise: Noise | None = None,
) -> Advice:
    """The smallest k whose predicted peak, at the upper end of its 95% prediction interval, fits
    ``device_memory_gib * utilisation``; with the predicted throughput against k = 0. ``noise``: the
    noise priors, estimated from repeated runs (:func:`pooled_noise`); default 2% / 5% worth 2 runs."""
    if not device_memory_gib > 0:
        raise ValueError(f"device memory must be positive, got {device_memory_gib}")
    if not 0 < utilisation <= 1:
        raise ValueError(f"utilisation must be in (0, 1], got {utilisation}")
    for o in observations:
        if not 0 <= o.ckpt_layers <= prior.n_layers:
            raise ValueError(f"run {o.run_id}: ckpt_layers {o.ckpt_layers} outside 0..{prior.n_layers}")
    noise = noise or Noise()
    level = DEFAULT_LEVEL
    coefficients = pool_layer_coefficients(similar, noise.memory)
    memory = fit_memory(
        prior, observations, target_group=target_group, coefficients=coefficients, noise=noise.memory
    )
    time = fit_step_time(prior, observations, noise.time)
    budget = device_memory_gib * utilisation
    table = [_k_prediction(k, memory, time, observations, budget) for k in range(prior.n_layers + 1)]
    fitting = next((row for row in table if row.fits), None)
    chosen = fitting or table[-1]
    shortfall = None if fitting else chosen.high_gib - budget
    basis = BASIS_MEASURED if memory.run_ids else BASIS_SIMILAR if coefficients.run_ids else BASIS_SHAPE
    message = _message(prior.n_layers, fitting, chosen, budget, shortfall)
    if basis == BASIS_SHAPE:
        message = "predicted from the model shape only: " + message
    notes = []
    if utilisation > 0.96:
        notes.append("utilisation above 0.96 can end in a driver OOM (training-xpu-pytorch 26.01 notes)")
    return Advice(
        n_layers=prior.n_layers,
        level=level,
        device_memory_gib=device_memory_gib,
        utilisation=utilisation,
        memory_budget_gib=budget,
        recommended_ckpt_layers=fitting.ckpt_layers if fitting else None,
        fits=fitting is not None,
        shortfall_gib=shortfall,
        chosen=chosen,
        basis=basis,
        memory_run_ids=memory.run_ids,
        time_run_ids=time.run_ids,
        similar_run_ids=coefficients.run_ids,
        similar_workloads=coefficients.workloads,
        table=tuple(table),
        prior=prior,
        memory_fit=memory.fit,
        time_fit=time.fit,
        message=message,
        notes=tuple(notes),
        noise=noise,
    )
