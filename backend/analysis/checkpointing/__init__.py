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

Modules: ``shape`` (the prior), ``calibration`` (the memory and step-time fits), ``advice``
(:func:`recommend`); every name is importable from this package.
"""

from __future__ import annotations

from ablate.backend.analysis.bayes_fit import LinearFit, Noise, NoiseEstimate, fit_linear, pooled_noise
from ablate.backend.analysis.checkpointing.advice import (
    BASIS_MEASURED,
    BASIS_SHAPE,
    BASIS_SIMILAR,
    DEFAULT_UTILISATION,
    Advice,
    KPrediction,
    recommend,
)
from ablate.backend.analysis.checkpointing.calibration import (
    DEFAULT_LEVEL,
    GROUP_SD,
    LAMBDA_SD,
    POOL_SPREAD_SD,
    PSI_SD,
    STATIC_SD,
    TIME_GROUP_SD,
    LayerCoefficients,
    MemoryModel,
    Observation,
    SimilarWorkload,
    TimeModel,
    fit_memory,
    fit_step_time,
    pool_layer_coefficients,
)
from ablate.backend.analysis.checkpointing.shape import (
    ATTENTION_KINDS,
    GIB,
    MemoryPrior,
    ModelShape,
    checkpointed_layer_bytes,
    full_layers,
    layer_activation_bytes,
    memory_prior,
    similar_shapes,
)

__all__ = [
    "ATTENTION_KINDS",
    "BASIS_MEASURED",
    "BASIS_SHAPE",
    "BASIS_SIMILAR",
    "DEFAULT_LEVEL",
    "DEFAULT_UTILISATION",
    "GIB",
    "GROUP_SD",
    "LAMBDA_SD",
    "POOL_SPREAD_SD",
    "PSI_SD",
    "STATIC_SD",
    "TIME_GROUP_SD",
    "Advice",
    "KPrediction",
    "LayerCoefficients",
    "LinearFit",
    "MemoryModel",
    "MemoryPrior",
    "ModelShape",
    "Noise",
    "NoiseEstimate",
    "Observation",
    "SimilarWorkload",
    "TimeModel",
    "checkpointed_layer_bytes",
    "fit_linear",
    "fit_memory",
    "fit_step_time",
    "full_layers",
    "layer_activation_bytes",
    "memory_prior",
    "pool_layer_coefficients",
    "pooled_noise",
    "recommend",
    "similar_shapes",
]
