"""What the advice says: the runs it used and its JSON (``GET /api/v1/advice/checkpointing``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ablate.backend.analysis import checkpointing as model


@dataclass(frozen=True)
class UsedRun:
    id: int
    release: str
    variant: str
    workload: str
    ckpt_layers: int
    peak_memory_gib: float | None
    step_time_s: float | None
    group: str = ""


@dataclass(frozen=True)
class CheckpointingAdvice:
    """The advice with its context: which release, cluster and workload, the shape, the runs used."""

    release: str
    cluster: str
    workload: str
    shape: model.ModelShape
    shape_source: str
    device_memory_source: str
    target_group: str
    advice: model.Advice
    runs: tuple[UsedRun, ...]
    similar_runs: tuple[UsedRun, ...]
    skipped_runs: tuple[tuple[int, str], ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        a = self.advice
        chosen = a.chosen
        return {
            "release": self.release,
            "cluster": self.cluster,
            "workload": self.workload,
            "n_layers": a.n_layers,
            "recommended_ckpt_layers": a.recommended_ckpt_layers,
            "fits": a.fits,
            "shortfall_gib": a.shortfall_gib,
            "message": a.message,
            "basis": a.basis,
            "level": a.level,
            "device_memory_gib": a.device_memory_gib,
            "device_memory_source": self.device_memory_source,
            "utilisation": a.utilisation,
            "memory_budget_gib": a.memory_budget_gib,
            "evaluated_ckpt_layers": chosen.ckpt_layers,
            "predicted_peak_memory_gib": {
                "value": chosen.peak_memory_gib,
                "low": chosen.low_gib,
                "high": chosen.high_gib,
            },
            "predicted_throughput_ratio": {
                "value": chosen.throughput_ratio,
                "low": chosen.throughput_ratio_low,
                "high": chosen.throughput_ratio_high,
            },
            "run_ids": {
                "memory": list(a.memory_run_ids),
                "step_time": list(a.time_run_ids),
                "similar": list(a.similar_run_ids),
            },
            "similar_workloads": list(a.similar_workloads),
            "runs": [_run_json(r) for r in self.runs],
            "similar_runs": [_run_json(r) for r in self.similar_runs],
            "skipped_runs": [{"id": i, "reason": why} for i, why in self.skipped_runs],
            "target_group": self.target_group,
            "shape": {**_shape_json(self.shape), "source": self.shape_source},
            "prior": _prior_json(a.prior),
            "memory_fit": _fit_json(a.memory_fit),
            "step_time_fit": _fit_json(a.time_fit),
            "noise": {"peak_memory": _noise_json(a.noise.memory), "step_time": _noise_json(a.noise.time)},
            "notes": [*a.notes, *self.notes],
            "table": [
                {
                    "ckpt_layers": row.ckpt_layers,
                    "peak_memory_gib": row.peak_memory_gib,
                    "low_gib": row.low_gib,
                    "high_gib": row.high_gib,
                    "fits": row.fits,
                    "throughput_ratio": row.throughput_ratio,
                    "throughput_ratio_low": row.throughput_ratio_low,
                    "throughput_ratio_high": row.throughput_ratio_high,
                    "measured_peak_memory_gib": list(row.measured_peak_gib),
                    "measured_step_time_s": list(row.measured_step_time_s),
                }
                for row in a.table
            ],
        }


def _noise_json(n: model.NoiseEstimate) -> dict[str, Any]:
    return {
        "relative_sd": n.rel_sd,
        "dof": n.dof,
        "cells": n.cells,
        "runs": n.runs,
        "prior_relative_sd": n.prior_rel,
        "prior_dof": n.prior_dof,
    }


def _run_json(r: UsedRun) -> dict[str, Any]:
    return {
        "id": r.id,
        "release": r.release,
        "variant": r.variant,
        "workload": r.workload,
        "ckpt_layers": r.ckpt_layers,
        "peak_memory_gib": r.peak_memory_gib,
        "step_time_s": r.step_time_s,
        "group": r.group,
    }


def _shape_json(s: model.ModelShape) -> dict[str, Any]:
    return {
        "n_layers": s.n_layers,
        "hidden": s.hidden,
        "n_heads": s.n_heads,
        "n_kv_heads": s.kv_heads,
        "ffn_hidden": s.ffn,
        "gated_mlp": s.gated_mlp,
        "vocab_size": s.vocab_size,
        "tie_embeddings": s.tie_embeddings,
        "seq_len": s.seq_len,
        "micro_batch": s.micro_batch,
        "precision": s.precision,
        "weights_fp32": s.weights_fp32,
        "attention": s.attention,
        "tensor_parallel": s.tensor_parallel,
        "pipeline_parallel": s.pipeline_parallel,
        "data_parallel": s.data_parallel,
        "zero_stage": s.zero_stage,
        "n_params": s.n_params,
    }


def _prior_json(p: model.MemoryPrior) -> dict[str, Any]:
    return {
        "weights_gib": p.weights_gib,
        "gradients_gib": p.gradients_gib,
        "optimizer_gib": p.optimizer_gib,
        "head_gib": p.head_gib,
        "baseline_gib": p.baseline_gib,
        "layer_activation_gib": p.layer_activation_gib,
        "layer_checkpointed_gib": p.layer_checkpointed_gib,
        "recompute_fraction": p.recompute_fraction,
        "peak_k0_gib": p.peak_gib(0),
        "peak_all_gib": p.peak_gib(p.n_layers),
    }


def _fit_json(f: model.LinearFit) -> dict[str, Any]:
    return {
        "parameters": dict(zip(f.names, f.mean, strict=True)),
        "sd": dict(zip(f.names, (math.sqrt(max(f.cov[i][i], 0.0)) for i in range(len(f.mean))), strict=True)),
        "sigma": f.sigma,
        "dof": None if math.isinf(f.dof) else f.dof,
        "n": f.n,
    }
