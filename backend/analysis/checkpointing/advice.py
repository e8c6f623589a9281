"""The checkpointing advisor's recommendation: the smallest k whose predicted peak fits the memory
budget, with the predicted throughput of every k (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ablate.backend.analysis.bayes_fit import LinearFit, Noise
from ablate.backend.analysis.checkpointing.calibration import (
    DEFAULT_LEVEL,
    MemoryModel,
    Observation,
    SimilarWorkload,
    TimeModel,
    fit_memory,
    fit_step_time,
    pool_layer_coefficients,
)
from ablate.backend.analysis.checkpointing.shape import MemoryPrior

DEFAULT_UTILISATION = 0.92
BASIS_MEASURED = "measured"
BASIS_SIMILAR = "similar workloads"
BASIS_SHAPE = "model shape only"


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
    noise priors, estimated from repeated runs (:func:`pooled_noise`); default: peak memory 2% worth a
    quarter of a run, step time 5% worth 2."""
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
