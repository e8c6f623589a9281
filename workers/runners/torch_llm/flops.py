"""Model FLOPs per token (PaLM, appendix B) and the derived TFLOPS / MFU.

FLOPs per token = 6N + 12 * L * H * Q * T, N the non-embedding parameters, L layers, H heads, Q head
dim, T sequence length. Recomputation from activation checkpointing is deliberately not counted, so
checkpointing lowers the MFU it reports: MFU measures useful model work, not hardware busyness.
"""

from __future__ import annotations

from torch import nn

from ablate.workers.runners.torch_llm.config import ModelConfig


def non_embedding_params(model: nn.Module) -> int:
    """Parameters excluding the input token-embedding table. The LM head's matrix is a matmul, so it
    counts; with tied embeddings the shared matrix counts once, as the head."""
    embed = getattr(model, "embed", None)
    tied = embed is not None and getattr(getattr(model, "head", None), "weight", None) is embed.weight
    skip = set() if tied or embed is None else {id(embed.weight)}
    # parameters() yields a shared (tied) tensor once.
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def flops_per_token(cfg: ModelConfig, n_non_embedding: int, seq_len: int) -> float:
    return 6.0 * n_non_embedding + 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len


def achieved_tflops(flops_token: float, tokens_per_s_per_device: float) -> float:
    return flops_token * tokens_per_s_per_device / 1e12


def mfu(tflops_per_device: float, peak_tflops_per_device: float | None) -> float | None:
    if not peak_tflops_per_device or peak_tflops_per_device <= 0:
        return None
    return tflops_per_device / peak_tflops_per_device
