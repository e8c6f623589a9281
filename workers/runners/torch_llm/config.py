"""Model size presets and the resolved training configuration of one run (no torch imports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ablate.backend.domain.model_shapes import PRESETS, ModelConfig, resolve_model
from ablate.backend.domain.runner import RunSpec

__all__ = ["PRESETS", "ModelConfig", "TrainConfig", "resolve_model"]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig
    model_name: str
    seq_len: int
    micro_batch: int
    grad_accum: int
    warmup_steps: int
    measured_steps: int
    precision: str  # requested: "bf16" | "fp16" | "fp32"
    accelerator: str  # "cpu" | "gpu" | "ppu"
    compile: bool
    compile_mode: str | None
    # torch.compile's backend: inductor (what CompilerOpt means); a test may ask for a cheaper one.
    compile_backend: str
    ckpt_layers: int  # 0 = no activation checkpointing
    seed: int
    lr: float
    zero_stage: int
    world_size: int
    rank: int
    local_rank: int
    peak_tflops_per_device: float | None
    data_batches: int  # distinct synthetic batches cycled through (kept on device, outside timing)
    cpu_autocast: bool

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.measured_steps

    @property
    def tokens_per_step_per_rank(self) -> int:
        return self.micro_batch * self.grad_accum * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_spec(cls, spec: RunSpec) -> TrainConfig:
        """Resolve a spec; raises ValueError for configurations this runner cannot run."""
        w, opts = spec.workload, spec.runner_options
        model = resolve_model(str(w.get("model") or "tiny"), opts)
        for dim in ("tensor_parallel", "pipeline_parallel"):
            if int(w.get(dim) or 1) != 1:
                raise ValueError(f"torch-llm implements data parallelism only; {dim}={w.get(dim)}")
        zero_stage = int(w.get("zero_stage") or 0)
        if zero_stage not in (0, 1):
            raise ValueError(f"torch-llm implements zero_stage 0 and 1 only, not {zero_stage}")
        micro = int(w.get("micro_batch") or 1)
        world = max(1, spec.world_size)
        global_batch = int(w.get("global_batch") or micro * world)
        if global_batch % (micro * world):
            raise ValueError(
                f"global_batch {global_batch} is not a multiple of micro_batch {micro} x world size {world}"
            )
        factors = set(spec.factors)
        ckpt_on = "ckpt_opt" in factors or _truthy(spec.env.get("CHECKPOINT_OPTIMIZATION"))
        ckpt_layers = int(opts.get("ckpt_layers", model.n_layers)) if ckpt_on else 0
        if not 0 <= ckpt_layers <= model.n_layers:
            raise ValueError(f"ckpt_layers {ckpt_layers} outside 0..{model.n_layers}")
        peak = spec.cluster.get("peak_tflops_per_device")
        return cls(
            model=model,
            model_name=str(w.get("model") or "tiny"),
            seq_len=int(w.get("seq_len") or 128),
            micro_batch=micro,
            grad_accum=global_batch // (micro * world),
            warmup_steps=int(w["warmup_steps"]) if w.get("warmup_steps") is not None else 2,
            measured_steps=max(1, int(w.get("measured_steps") or 5)),
            precision=str(w.get("precision") or "bf16").lower(),
            accelerator=spec.accelerator,
            compile="compiler_opt" in factors or bool(opts.get("compile", False)),
            compile_mode=opts.get("compile_mode"),
            compile_backend=str(opts.get("compile_backend") or "inductor"),
            ckpt_layers=ckpt_layers,
            seed=int(opts.get("seed", 1234)),
            lr=float(opts.get("lr", 3e-4)),
            zero_stage=zero_stage,
            world_size=world,
            rank=spec.rank,
            local_rank=spec.local_rank,
            peak_tflops_per_device=float(peak) if peak else None,
            data_batches=int(opts.get("data_batches", 4)),
            cpu_autocast=bool(opts.get("cpu_autocast", False)),
        )
