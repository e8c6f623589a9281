"""What the advice says: the runs it used and its answer (``GET /api/v1/advice/checkpointing``), as
:class:`~ablate.backend.schemas.advice.CheckpointingAdviceOut`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ablate.backend.analysis import checkpointing as model
from ablate.backend.schemas.advice import (
    AdviceRunIds,
    CheckpointingAdviceOut,
    FitOut,
    KRowOut,
    NoiseEstimateOut,
    NoiseOut,
    PredictionInterval,
    PriorOut,
    ShapeOut,
    SkippedRunOut,
    UsedRunOut,
)

# A run the advice used: the answer's own model (immutable), so that its fields are written once.
UsedRun = UsedRunOut


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

    def to_model(self) -> CheckpointingAdviceOut:
        """The answer as the API serves it."""
        a = self.advice
        chosen = a.chosen
        return CheckpointingAdviceOut(
            release=self.release,
            cluster=self.cluster,
            workload=self.workload,
            n_layers=a.n_layers,
            recommended_ckpt_layers=a.recommended_ckpt_layers,
            fits=a.fits,
            shortfall_gib=a.shortfall_gib,
            message=a.message,
            basis=a.basis,
            level=a.level,
            device_memory_gib=a.device_memory_gib,
            device_memory_source=self.device_memory_source,
            utilisation=a.utilisation,
            memory_budget_gib=a.memory_budget_gib,
            evaluated_ckpt_layers=chosen.ckpt_layers,
            predicted_peak_memory_gib=PredictionInterval(
                value=chosen.peak_memory_gib, low=chosen.low_gib, high=chosen.high_gib
            ),
            predicted_throughput_ratio=PredictionInterval(
                value=chosen.throughput_ratio,
                low=chosen.throughput_ratio_low,
                high=chosen.throughput_ratio_high,
            ),
            run_ids=AdviceRunIds(
                memory=a.memory_run_ids, step_time=a.time_run_ids, similar=a.similar_run_ids
            ),
            similar_workloads=a.similar_workloads,
            runs=list(self.runs),
            similar_runs=list(self.similar_runs),
            skipped_runs=[SkippedRunOut(id=i, reason=why) for i, why in self.skipped_runs],
            target_group=self.target_group,
            shape=ShapeOut.model_validate(
                {
                    **asdict(self.shape),
                    "n_kv_heads": self.shape.kv_heads,
                    "ffn_hidden": self.shape.ffn,
                    "n_params": self.shape.n_params,
                    "source": self.shape_source,
                }
            ),
            prior=PriorOut.model_validate(
                {
                    **asdict(a.prior),
                    "peak_k0_gib": a.prior.peak_gib(0),
                    "peak_all_gib": a.prior.peak_gib(a.prior.n_layers),
                }
            ),
            memory_fit=_fit(a.memory_fit),
            step_time_fit=_fit(a.time_fit),
            noise=NoiseOut(peak_memory=_noise(a.noise.memory), step_time=_noise(a.noise.time)),
            notes=[*a.notes, *self.notes],
            table=[
                KRowOut.model_validate({**asdict(row), "measured_peak_memory_gib": row.measured_peak_gib})
                for row in a.table
            ],
        )

    def to_json(self) -> dict[str, Any]:
        """The API's JSON body (``ablate advise checkpointing --json`` prints it)."""
        return self.to_model().model_dump(mode="json")


def _noise(n: model.NoiseEstimate) -> NoiseEstimateOut:
    return NoiseEstimateOut.model_validate(
        {**asdict(n), "relative_sd": n.rel_sd, "prior_relative_sd": n.prior_rel}
    )


def _fit(f: model.LinearFit) -> FitOut:
    sd = (math.sqrt(max(f.cov[i][i], 0.0)) for i in range(len(f.mean)))
    return FitOut(
        parameters=dict(zip(f.names, f.mean, strict=True)),
        sd=dict(zip(f.names, sd, strict=True)),
        sigma=f.sigma,
        dof=None if math.isinf(f.dof) else f.dof,
        n=f.n,
    )
