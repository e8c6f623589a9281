"""The advisor's pure model on synthetic data: the prior's formula, calibration, intervals, advice."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest

from ablate.backend.analysis.checkpointing import (
    BASIS_MEASURED,
    BASIS_SHAPE,
    BASIS_SIMILAR,
    GIB,
    MemoryPrior,
    ModelShape,
    Observation,
    SimilarWorkload,
    checkpointed_layer_bytes,
    full_layers,
    layer_activation_bytes,
    memory_prior,
    recommend,
    similar_shapes,
)

GPT = ModelShape(n_layers=24, hidden=2048, n_heads=16, seq_len=2048, micro_batch=2, vocab_size=50304)
LLAMA = ModelShape(
    n_layers=16, hidden=2048, n_heads=32, n_kv_heads=8, seq_len=2048, micro_batch=2, vocab_size=32000,
    ffn_hidden=8192, gated_mlp=True, attention="sdpa", weights_fp32=True,
)  # fmt: skip


def truth(prior: MemoryPrior, k: int, *, offset: float, psi_a: float, psi_c: float) -> float:
    """A synthetic device whose per-layer bytes differ from the prior's."""
    full = full_layers(k, prior.n_layers)
    return (
        prior.fixed_gib
        + offset
        + psi_a * prior.layer_activation_gib * full
        + psi_c * prior.layer_checkpointed_gib * k
    )


def observations(
    prior: MemoryPrior, ks: list[int], *, seed: int, noise: float = 0.01, repeats: int = 1, **true: float
) -> list[Observation]:
    rng = random.Random(seed)
    out = []
    for k in ks:
        for _ in range(repeats):
            peak = truth(prior, k, **true) * (1 + rng.gauss(0, noise))
            time = 2.0 * (1 + 0.02 * k) * (1 + rng.gauss(0, noise))
            out.append(Observation(len(out) + 1, k, "g", peak, time))
    return out


TRUE = {"offset": 1.0, "psi_a": 1.4, "psi_c": 0.7}


def test_standard_shape_gives_the_textbook_formula() -> None:
    s, b, h, a = GPT.seq_len, GPT.micro_batch, GPT.hidden, GPT.n_heads
    assert layer_activation_bytes(GPT) == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert layer_activation_bytes(replace(GPT, attention="flash")) == pytest.approx(s * b * h * 34)
    assert layer_activation_bytes(replace(GPT, tensor_parallel=4)) == pytest.approx(
        s * b * h * (34 + 5 * a * s / h) / 4
    )
    assert checkpointed_layer_bytes(GPT) == 2 * s * b * h
    # fp32 activations take twice the bytes; a gated FFN of the same width stores twice the FFN tensors.
    assert layer_activation_bytes(replace(GPT, precision="fp32")) == pytest.approx(
        2 * layer_activation_bytes(GPT)
    )
    gated = replace(GPT, gated_mlp=True, attention="flash")
    assert layer_activation_bytes(gated) == pytest.approx(s * b * h * (34 + 16))


def test_static_memory_by_precision_and_zero_stage() -> None:
    n = GPT.n_params
    mixed = memory_prior(GPT)
    assert (mixed.weights_gib, mixed.gradients_gib, mixed.optimizer_gib) == pytest.approx(
        (2 * n / GIB, 2 * n / GIB, 12 * n / GIB)
    )
    z1 = memory_prior(replace(GPT, zero_stage=1, data_parallel=8))
    assert z1.optimizer_gib == pytest.approx(12 * n / 8 / GIB) and z1.gradients_gib == mixed.gradients_gib
    z3 = memory_prior(replace(GPT, zero_stage=3, data_parallel=8))
    assert z3.static_gib == pytest.approx(16 * n / 8 / GIB)
    fp32 = memory_prior(replace(GPT, precision="fp32"))
    assert (fp32.weights_gib, fp32.optimizer_gib) == pytest.approx((4 * n / GIB, 8 * n / GIB))
    # parameters of a GPT-2-like 1.3B: 12 h^2 per layer plus embeddings
    assert n == pytest.approx(24 * 12 * 2048**2 + 2 * 50304 * 2048, rel=0.01)


def test_without_runs_the_answer_is_the_shape_prior() -> None:
    prior = memory_prior(LLAMA)
    advice = recommend(prior, [], device_memory_gib=80)
    assert advice.basis == BASIS_SHAPE and advice.message.startswith("predicted from the model shape only")
    assert advice.memory_run_ids == () and advice.similar_run_ids == ()
    peaks = [row.peak_memory_gib for row in advice.table]
    assert peaks[0] == pytest.approx(prior.peak_gib(0)) and peaks[-1] == pytest.approx(prior.peak_gib(16))
    assert all(a > b for a, b in itertools.pairwise(peaks[:-1]))  # each checkpointed layer saves ...
    # ... but the last: the layer recomputed in backward holds its activations again
    assert peaks[-1] == pytest.approx(peaks[-2] + prior.layer_checkpointed_gib)
    for row in advice.table:
        assert row.low_gib < row.peak_memory_gib < row.high_gib
    assert advice.table[0].throughput_ratio == 1.0
    assert all(r.throughput_ratio_low <= r.throughput_ratio <= r.throughput_ratio_high for r in advice.table)
    assert advice.table[-1].throughput_ratio < 1.0


def test_calibration_recovers_a_device_unlike_the_prior() -> None:
    prior = memory_prior(LLAMA)
    obs = observations(prior, [0, 2, 4, 8, 16], seed=3, repeats=2, **TRUE)
    advice = recommend(prior, obs, device_memory_gib=200, target_group="g")
    assert advice.basis == BASIS_MEASURED and advice.memory_run_ids == tuple(range(1, 11))
    for k in (6, 12):  # never measured
        row = advice.table[k]
        real = truth(prior, k, **TRUE)
        assert row.low_gib <= real <= row.high_gib
        assert abs(row.peak_memory_gib - real) / real < 0.02
        # and the prior alone was far off
        assert abs(prior.peak_gib(k) - real) / real > 0.05
    # throughput: T(k) = T0 (1 + 0.02 k), so the ratio at k = 8 is 1 / 1.16
    row = advice.table[8]
    assert row.throughput_ratio_low <= 1 / 1.16 <= row.throughput_ratio_high
    assert row.throughput_ratio == pytest.approx(1 / 1.16, rel=0.03)


def test_held_out_intervals_cover_at_about_their_level() -> None:
    """200 seeded synthetic sweeps; each holds k = 8 out. A 95% prediction interval must cover the
    held-out measurement in most of them (the t quantile on few points errs wide, not narrow)."""
    prior = memory_prior(LLAMA)
    covered = 0
    widths = []
    trials = 200
    for seed in range(trials):
        rng = random.Random(seed)
        true = {"offset": rng.uniform(-1, 3), "psi_a": rng.uniform(0.6, 1.6), "psi_c": rng.uniform(0.5, 2)}
        sweep = observations(prior, [0, 4, 8, 12, 16], seed=seed, noise=0.02, **true)
        held = next(o for o in sweep if o.ckpt_layers == 8)
        train = [o for o in sweep if o is not held]
        row = recommend(prior, train, device_memory_gib=500, target_group="g").table[8]
        covered += row.low_gib <= float(held.peak_memory_gib or 0) <= row.high_gib
        widths.append((row.high_gib - row.low_gib) / row.peak_memory_gib)
    assert 0.90 <= covered / trials <= 1.0
    assert sorted(widths)[trials // 2] < 0.25  # informative, not a blanket


def test_more_runs_narrow_the_interval() -> None:
    prior = memory_prior(LLAMA)
    few = recommend(
        prior, observations(prior, [0, 16], seed=1, **TRUE), device_memory_gib=200, target_group="g"
    )
    many = recommend(
        prior, observations(prior, [0, 4, 8, 12, 16], seed=1, repeats=3, **TRUE), device_memory_gib=200,
        target_group="g",
    )  # fmt: skip
    shape = recommend(prior, [], device_memory_gib=200)

    def width(a: object, k: int) -> float:
        row = a.table[k]  # type: ignore[attr-defined]
        return float(row.high_gib - row.low_gib)

    assert width(many, 8) < width(few, 8) < width(shape, 8)


def test_recommendation_is_the_smallest_k_whose_upper_bound_fits() -> None:
    prior = memory_prior(LLAMA)
    obs = observations(prior, [0, 4, 8, 12, 16], seed=2, repeats=2, **TRUE)
    base = recommend(prior, obs, device_memory_gib=1000, target_group="g")
    highs = [row.high_gib for row in base.table]
    assert base.recommended_ckpt_layers == 0 and base.fits and base.shortfall_gib is None
    assert base.message.startswith("no checkpointing needed: predicted peak")
    # a budget between the upper bounds at k = 9 and k = 10
    budget = (highs[9] + highs[10]) / 2
    advice = recommend(prior, obs, device_memory_gib=budget / 0.9, utilisation=0.9, target_group="g")
    assert advice.memory_budget_gib == pytest.approx(budget)
    assert advice.recommended_ckpt_layers == 10 and advice.chosen.ckpt_layers == 10
    assert [row.fits for row in advice.table] == [k >= 10 for k in range(17)]
    assert advice.chosen.throughput_ratio < 1 and "10 of 16 layers" in advice.message
    # not even k = L fits: say so, and by how much
    tight = recommend(prior, obs, device_memory_gib=highs[-1] - 1.5, utilisation=1.0, target_group="g")
    assert tight.recommended_ckpt_layers is None and not tight.fits
    assert tight.shortfall_gib == pytest.approx(1.5) and tight.chosen.ckpt_layers == 16
    assert tight.message.startswith("does not fit: even with all 16 layers checkpointed")


def test_similar_workloads_inform_a_workload_without_runs() -> None:
    prior = memory_prior(LLAMA)
    other_shape = replace(LLAMA, micro_batch=4, n_layers=12)
    assert similar_shapes(LLAMA, other_shape)
    other_prior = memory_prior(other_shape)
    other = SimilarWorkload(
        "other", other_prior, tuple(observations(other_prior, [0, 4, 8, 12], seed=5, **TRUE))
    )
    pooled = recommend(prior, [], device_memory_gib=500, similar=[other])
    alone = recommend(prior, [], device_memory_gib=500)
    assert pooled.basis == BASIS_SIMILAR and pooled.similar_run_ids == (1, 2, 3, 4)
    assert pooled.similar_workloads == ("other",) and pooled.memory_run_ids == ()
    real = truth(prior, 0, **TRUE)
    assert abs(pooled.table[0].peak_memory_gib - real) < abs(alone.table[0].peak_memory_gib - real)


def test_shapes_of_another_kind_are_not_similar() -> None:
    assert not similar_shapes(LLAMA, replace(LLAMA, attention="eager"))
    assert not similar_shapes(LLAMA, replace(LLAMA, precision="fp32"))
    assert not similar_shapes(LLAMA, replace(LLAMA, micro_batch=16))  # 8x the activations
    assert similar_shapes(LLAMA, replace(LLAMA, micro_batch=8))


def test_bad_inputs_are_refused() -> None:
    prior = memory_prior(LLAMA)
    for kwargs, msg in (
        ({"device_memory_gib": 0}, "device memory must be positive"),
        ({"device_memory_gib": 80, "utilisation": 0}, "utilisation"),
        ({"device_memory_gib": 80, "utilisation": 1.2}, "utilisation"),
    ):
        with pytest.raises(ValueError, match=msg):
            recommend(prior, [], **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ckpt_layers 17 outside 0\.\.16"):
        recommend(prior, [Observation(1, 17, "", 10.0)], device_memory_gib=80)
    assert ModelShape(0, 64, 4, 128, 1, 512).problems() == ["n_layers must be at least 1, got 0"]
    assert "unknown attention kind" in replace(LLAMA, attention="magic").problems()[0]


def test_utilisation_above_the_driver_limit_is_flagged() -> None:
    prior = memory_prior(LLAMA)
    assert recommend(prior, [], device_memory_gib=80, utilisation=0.98).notes
    assert not recommend(prior, [], device_memory_gib=80).notes
    assert math.isinf(recommend(prior, [], device_memory_gib=80).memory_fit.dof)
