"""FLOPs/TFLOPS/MFU against an independent, by-hand computation of the PaLM formula."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ablate.backend.domain.runner import RunSpec, get_runner
from ablate.workers.runners.torch_llm import flops
from ablate.workers.runners.torch_llm.config import ModelConfig, resolve_model
from ablate.workers.runners.torch_llm.model import Transformer


def _by_hand_non_embedding(dim: int, layers: int, heads: int, kv_heads: int, hidden: int, vocab: int) -> int:
    head_dim = dim // heads
    attn = dim * dim * 2 + 2 * dim * kv_heads * head_dim  # wq, wo + wk, wv
    mlp = 3 * dim * hidden
    norms = 2 * dim
    return layers * (attn + mlp + norms) + dim + dim * vocab  # + final norm + LM head


@pytest.mark.parametrize(
    ("cfg", "hidden"),
    [
        (ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=512, tie_embeddings=True), 192),
        (ModelConfig(dim=128, n_layers=3, n_heads=8, n_kv_heads=2, vocab_size=300, ffn_hidden=320), 320),
    ],
)
def test_non_embedding_params_match_hand_count(cfg: ModelConfig, hidden: int) -> None:
    model = Transformer(cfg, max_seq_len=16)
    expected = _by_hand_non_embedding(
        cfg.dim, cfg.n_layers, cfg.n_heads, cfg.kv_heads, hidden, cfg.vocab_size
    )
    assert flops.non_embedding_params(model) == expected
    total = sum(p.numel() for p in model.parameters())
    # Untied: the embedding table is the only thing left out; tied: it *is* the head.
    assert total - expected == (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.dim)


def test_llama3_8b_shape_is_about_8b() -> None:
    cfg = resolve_model("deepspeed/llama3-8b")
    n = _by_hand_non_embedding(4096, 32, 32, 8, 14336, 128256)
    assert 7.4e9 < n + cfg.vocab_size * cfg.dim < 8.1e9
    # PaLM: 6N + 12 L H Q T at T = 8192.
    fpt = flops.flops_per_token(cfg, n, 8192)
    assert fpt == 6 * n + 12 * 32 * 32 * 128 * 8192


def test_run_reports_tflops_and_mfu_from_the_formula(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(cluster={"peak_tflops_per_device": 0.25})
    res = get_runner("torch-llm").run(spec)
    assert res.succeeded, res.error
    n = _by_hand_non_embedding(64, 2, 4, 4, 192, 512)
    fpt = 6 * n + 12 * 2 * 4 * 16 * 64
    assert float(res.provenance["flops_per_token"]) == pytest.approx(fpt, rel=1e-5)
    tps_dev = res.metrics["throughput_tokens_per_s_per_device"][0]
    assert res.metrics["tflops_per_device"][0] == pytest.approx(fpt * tps_dev / 1e12)
    assert res.metrics["mfu"][0] == pytest.approx(res.metrics["tflops_per_device"][0] / 0.25)


def test_mfu_omitted_without_peak(make_spec: Callable[..., RunSpec]) -> None:
    res = get_runner("torch-llm").run(make_spec(cluster={"peak_tflops_per_device": None}, measured_steps=1))
    assert res.succeeded and "mfu" not in res.metrics and "tflops_per_device" in res.metrics
