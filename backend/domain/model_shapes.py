"""Model shapes of the built-in llama-style trainer: presets by name and their dimensions.

A ground-floor fact, not the runner's: the checkpointing advisor and the sweep checks (services) read
the same shapes the runner trains, without importing the runner (workers/ sits beside, not below,
the services that reason about it)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


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
