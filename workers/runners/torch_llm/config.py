"""Model size presets and the resolved training configuration of one run (no torch imports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ablate.backend.domain.runner import RunSpec


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    vocab_size: int
    n_kv_heads: int | None = None  # None: same as n_heads (no grouped-query attention)
    ffn_hidden: int | None = None  # None: llama's 8/3 * dim rounded up to multiple_of
    multiple_of: int = 64
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hidden(self) -> int:
        if self.ffn_hidden:
            return self.ffn_hidden
        h = int(2 * 4 * self.dim / 3)
        return self.multiple_of * ((h + self.multiple_of - 1) // self.multiple_of)

    def validate(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not divisible by n_kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head dim {self.head_dim} must be even for rotary embeddings")


PRESETS: dict[str, ModelConfig] = {
    # CPU sizes: seconds per run on a laptop core.
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=512, tie_embeddings=True),
    "small": ModelConfig(dim=128, n_layers=4, n_heads=4, vocab_size=1024),
    "llama-125m": ModelConfig(dim=768, n_layers=12, n_heads=12, vocab_size=32000, tie_embeddings=True),
    # GPU sizes, shapes of the public checkpoints.
    "llama-1b": ModelConfig(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256, ffn_hidden=8192,
        tie_embeddings=True, rope_theta=500000.0,
    ),
    "llama3-3b": ModelConfig(
        dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, vocab_size=128256, ffn_hidden=8192,
        tie_embeddings=True, rope_theta=500000.0,
    ),
    "llama2-7b": ModelConfig(dim=4096, n_layers=32, n_heads=32, vocab_size=32000, ffn_hidden=11008),
    "llama3-8b": ModelConfig(
        dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, ffn_hidden=14336,
        rope_theta=500000.0,
    ),
}  # fmt: skip

_MODEL_OVERRIDES = {f.name for f in fields(ModelConfig)}


def resolve_model(name: str, overrides: dict[str, Any] | None = None) -> ModelConfig:
    """A preset by name (a "deepspeed/llama3-8b"-style prefix is ignored), with dimension overrides."""
    key = name.split("/")[-1].lower()
    if key not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    cfg = replace(PRESETS[key], **{k: v for k, v in (overrides or {}).items() if k in _MODEL_OVERRIDES})
    cfg.validate()
    return cfg


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
