"""The checkpointing advisor's answer (``GET /api/v1/advice/checkpointing``, ``ablate advise
checkpointing --json``), as the API documents and serves it. docs/api.md shows an example and
docs/advisor.md the model behind the numbers; the service builds it
(:meth:`ablate.backend.services.advice.CheckpointingAdvice.to_model`)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from ablate.backend.schemas.common import Out


class PredictionInterval(Out):
    """A prediction and its interval at the advice's ``level``."""

    value: float
    low: float
    high: float


class AdviceRunIds(Out):
    """The ids of the runs each fit used."""

    memory: list[int] = Field(description="Runs of this workload on this cluster in the peak-memory fit.")
    step_time: list[int] = Field(description="Runs in the step-time fit.")
    similar: list[int] = Field(
        description="Runs of similar workloads that informed the per-layer coefficients."
    )


class UsedRunOut(Out):
    """A run the advice used: what it measured at its number of checkpointed layers."""

    model_config = ConfigDict(frozen=True)

    id: int
    release: str
    variant: str
    workload: str
    ckpt_layers: int
    peak_memory_gib: float | None
    step_time_s: float | None
    group: str = Field(
        description="Its release and factors other than ckpt_opt: runs of one group share an offset."
    )


class SkippedRunOut(Out):
    """A run of the workload the advice could not use, and why."""

    id: int
    reason: str


class ShapeOut(Out):
    """The model shape the prior is computed from, one device's view of it."""

    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    gated_mlp: bool
    vocab_size: int
    tie_embeddings: bool
    seq_len: int
    micro_batch: int
    precision: str
    weights_fp32: bool
    attention: str
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    zero_stage: int
    n_params: int
    source: str = Field(
        description="Where the shape came from: a torch-llm preset, runner_options or provenance."
    )


class PriorOut(Out):
    """The analytical memory estimate in GiB per device: ``peak(k) = fixed + A*max(L-k, 1) + C*k``."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    head_gib: float
    baseline_gib: float
    layer_activation_gib: float = Field(description="A: one layer that keeps its activations.")
    layer_checkpointed_gib: float = Field(description="C: one checkpointed layer (its input).")
    recompute_fraction: float
    peak_k0_gib: float = Field(description="The prior's peak with no layer checkpointed.")
    peak_all_gib: float = Field(description="The prior's peak with every layer checkpointed.")


class FitOut(Out):
    """A Gaussian-prior least-squares fit: posterior means and sds by parameter, the noise sd."""

    parameters: dict[str, float]
    sd: dict[str, float]
    sigma: float
    dof: float | None = Field(description="The noise's degrees of freedom; null when infinite.")
    n: int


class NoiseEstimateOut(Out):
    """The relative noise of one run, pooled from repeats of the cluster's other workloads."""

    relative_sd: float
    dof: float
    cells: int
    runs: int
    prior_relative_sd: float
    prior_dof: float


class NoiseOut(Out):
    peak_memory: NoiseEstimateOut
    step_time: NoiseEstimateOut


class KRowOut(Out):
    """The prediction for one number of checkpointed layers ``k``, with what was measured there."""

    # The analysis's KPrediction, in its order, its measurements listed under the API's names
    # (tests/api/test_schema_fields.py fails when the two lists part).
    ckpt_layers: int
    peak_memory_gib: float
    low_gib: float
    high_gib: float
    fits: bool
    throughput_ratio: float
    throughput_ratio_low: float
    throughput_ratio_high: float
    measured_peak_memory_gib: list[float]
    measured_step_time_s: list[float]


class CheckpointingAdviceOut(Out):
    """How many layers to checkpoint: the smallest ``k`` whose predicted peak memory, at the upper end
    of its prediction interval, fits ``device_memory_gib x utilisation``."""

    release: str
    cluster: str
    workload: str
    n_layers: int
    recommended_ckpt_layers: int | None = Field(description="null: not even every layer checkpointed fits.")
    fits: bool
    shortfall_gib: float | None = Field(
        description="How far k = n_layers is above the budget when nothing fits."
    )
    message: str
    basis: str = Field(description="measured, similar workloads or model shape only.")
    level: float
    device_memory_gib: float
    device_memory_source: str
    utilisation: float
    memory_budget_gib: float
    evaluated_ckpt_layers: int = Field(description="The recommended k, or n_layers when nothing fits.")
    predicted_peak_memory_gib: PredictionInterval
    predicted_throughput_ratio: PredictionInterval = Field(
        description="Throughput at the evaluated k over that at k = 0."
    )
    run_ids: AdviceRunIds
    similar_workloads: list[str]
    runs: list[UsedRunOut]
    similar_runs: list[UsedRunOut]
    skipped_runs: list[SkippedRunOut]
    target_group: str
    shape: ShapeOut
    prior: PriorOut
    memory_fit: FitOut
    step_time_fit: FitOut
    noise: NoiseOut
    notes: list[str]
    table: list[KRowOut]
