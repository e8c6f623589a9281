"""Every built-in parser on realistic logs (tests/parsers/data), malformed lines included."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ablate.workers.parsers import get_parser, known_parsers
from ablate.workers.parsers.summary import Context, summarize

DATA = Path(__file__).parent / "data"

LJPERF_OPTIONS: dict[str, Any] = {
    "patterns": [
        {
            "regex": r"\[ljperf\] step (?P<step>\d+)/(?P<total>\d+) \| tokens/s: (?P<tps>\S+) \| "
            r"step_time: (?P<t>[\d.]+)s \| max_mem: (?P<mem>[\d.]+)GB \| loss: (?P<loss>[\d.]+)",
            "metrics": {
                "tps": "throughput_tokens_per_s",
                "t": "step_time_s",
                "mem": {"name": "peak_memory_gib", "unit": "GiB"},
                "loss": "loss",
            },
        },
        {"regex": r"\[ljperf\] total time: (?P<elapsed>[\d.]+)s", "metrics": {"elapsed": "elapsed_s"}},
    ],
    "malformed": r"^\[ljperf\] step \d+",
}


def _parse(name: str, file: str, options: dict[str, Any], **ctx: Any):  # type: ignore[no-untyped-def]
    parser = get_parser(name, options)
    lines = (DATA / file).read_text().splitlines()
    live = [rec.step for line in lines for rec in parser.feed(line)]
    parsed = parser.finish()
    context = Context(seq_len=parser.seq_len, global_batch=parser.global_batch, **ctx)
    metrics, series = summarize(parsed, context)
    return parsed, metrics, series, live


def test_jsonl() -> None:
    parsed, m, series, live = _parse("jsonl", "jsonl_train.log", {}, devices=8, warmup_steps=1)
    assert [s.step for s in parsed.steps] == [1, 2, 3, 6] and live == [1, 2, 3, 6]
    assert parsed.malformed_lines == 3  # truncated object, non-numeric metric, object without a step
    assert m["step_time_s"] == (pytest.approx(0.50), "s")
    assert m["throughput_tokens_per_s"][0] == pytest.approx(32768.0)
    assert m["throughput_tokens_per_s_per_device"] == (pytest.approx(4096.0), "tokens/s/device")
    assert m["peak_memory_gib"][0] == pytest.approx(20.7)
    assert m["loss"][0] == pytest.approx(8.2) and m["elapsed_s"][0] == pytest.approx(5.9)
    assert series["step_time_s"] == ([1, 2, 3, 6], [2.10, 0.52, 0.50, 0.49])  # warm-up kept in series


def test_mllog() -> None:
    parsed, m, series, _ = _parse("mllog", "mlperf_llama2_lora.log", {}, warmup_steps=1)
    assert [s.step for s in parsed.steps] == [80, 160, 240]
    assert parsed.malformed_lines == 2  # non-dict throughput, truncated JSON
    assert m["throughput_samples_per_s"][0] == pytest.approx(2.66)
    assert m["throughput_tokens_per_s"][0] == pytest.approx(2.66 * 8192)  # max_sequence_length from the log
    assert m["step_time_s"][0] == pytest.approx(8 / 2.66)  # global_batch_size from the log
    assert m["loss"][0] == pytest.approx(1.33)
    assert m["elapsed_s"] == (pytest.approx(90.0), "s")
    assert series["loss"] == ([80, 160, 240], [1.52, 1.41, 1.33])


def test_deepspeed() -> None:
    parsed, m, _, _ = _parse(
        "deepspeed",
        "deepspeed_llama3_8b.log",
        {"seq_len": 8192, "global_batch": 64},
        devices=8,
        warmup_steps=1,
        peak_tflops_per_device=989.0,
    )
    assert [s.step for s in parsed.steps] == [10, 20, 40, 50]
    assert parsed.malformed_lines == 2  # empty samples/s, profiler line without a number
    assert m["throughput_samples_per_s"][0] == pytest.approx(32.0)
    assert m["throughput_tokens_per_s"][0] == pytest.approx(32.0 * 8192)
    assert m["throughput_tokens_per_s_per_device"][0] == pytest.approx(32.0 * 8192 / 8)
    assert m["step_time_s"][0] == pytest.approx(2.0)
    assert m["peak_memory_gib"][0] == pytest.approx(52.7)
    assert m["tflops_per_device"] == (pytest.approx(392.5), "TFLOPS")  # flops profiler summary
    assert m["mfu"] == (pytest.approx(392.5 / 989.0), "ratio")


def test_deepspeed_profiler_only() -> None:
    parser = get_parser("deepspeed", {"seq_len": 2048})
    lines = (DATA / "deepspeed_llama3_8b.log").read_text().splitlines()
    parser.feed_lines(line for line in lines if "timer.py" not in line)
    m, _ = summarize(parser.finish(), Context(seq_len=2048, global_batch=64))
    assert m["throughput_samples_per_s"][0] == pytest.approx(31.84)
    assert m["step_time_s"][0] == pytest.approx(2.01)  # iter latency
    assert m["throughput_tokens_per_s"][0] == pytest.approx(31.84 * 2048)


def test_deepspeed_steps_lines() -> None:
    parser = get_parser("deepspeed", {"seq_len": 1024, "global_batch": 32})
    recs = parser.feed(" steps: 100 loss: 5.4321 iter time (s): 0.523 samples/sec: 61.2")
    assert recs[0].step == 100 and recs[0].values["step_time_s"] == pytest.approx(0.523)
    assert recs[0].values["throughput_tokens_per_s"] == pytest.approx(61.2 * 1024)
    parser.feed(" steps: 101 loss: oops iter time (s): 0.5 samples/sec: 61.0")
    assert parser.finish().malformed_lines == 1


def test_megatron() -> None:
    parsed, m, _, _ = _parse("megatron", "megatron_gpt.log", {"seq_len": 4096}, devices=8, warmup_steps=1)
    assert [s.step for s in parsed.steps] == [1, 2, 3, 6]
    assert parsed.malformed_lines == 2  # no total, non-numeric elapsed time
    assert parsed.total_steps == 100
    assert m["step_time_s"][0] == pytest.approx(5.0803)
    assert m["throughput_tokens_per_s"][0] == pytest.approx(256 * 4096 / 5.0803)
    assert m["throughput_samples_per_s"][0] == pytest.approx(256 / 5.0803)
    assert m["tflops_per_device"][0] == pytest.approx(412.5)
    assert m["loss"][0] == pytest.approx(9.65)
    assert m["peak_memory_gib"][0] == pytest.approx(60.0)
    assert m["peak_memory_reserved_gib"][0] == pytest.approx(70.0)


def test_regex_for_ljperf() -> None:
    parsed, m, _, live = _parse("regex", "ljperf.log", LJPERF_OPTIONS, devices=16, warmup_steps=1)
    assert live == [1, 2, 4, 5]
    assert parsed.malformed_lines == 2  # "???" tokens/s, truncated step line
    assert parsed.total_steps == 20
    assert m["throughput_tokens_per_s"][0] == pytest.approx(163900.1)
    assert m["throughput_tokens_per_s_per_device"][0] == pytest.approx(163900.1 / 16)
    assert m["step_time_s"][0] == pytest.approx(1.599)
    assert m["peak_memory_gib"][0] == pytest.approx(61.4) and m["loss"][0] == pytest.approx(9.60)
    assert m["elapsed_s"][0] == pytest.approx(40.5)


def test_regex_custom_metric_unit() -> None:
    parser = get_parser(
        "regex",
        {
            "patterns": [
                {
                    "regex": r"step (?P<step>\d+) mfu% (?P<m>[\d.]+)",
                    "metrics": {"m": {"name": "mfu_pct", "unit": "%"}},
                }
            ]
        },
    )
    parser.feed("step 1 mfu% 41.5")
    m, _ = summarize(parser.finish(), Context())
    assert m["mfu_pct"] == (41.5, "%")


def test_registry() -> None:
    assert known_parsers() == ["deepspeed", "jsonl", "megatron", "mllog", "regex"]
    with pytest.raises(ValueError, match="known parsers: deepspeed"):
        get_parser("nope")
    with pytest.raises(ValueError, match="patterns"):
        get_parser("regex", {})


_ALL_LINES = [line for f in sorted(DATA.iterdir()) for line in f.read_text().splitlines()]


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(["jsonl", "mllog", "deepspeed", "megatron", "regex"]),
    cut=st.integers(min_value=0, max_value=400),
    junk=st.text(max_size=40),
    seed=st.integers(0, 10_000),
)
def test_parsers_never_raise_on_mangled_lines(name: str, cut: int, junk: str, seed: int) -> None:
    parser = get_parser(name, LJPERF_OPTIONS if name == "regex" else {"seq_len": 128, "global_batch": 8})
    line = random.Random(seed).choice(_ALL_LINES)
    parser.feed(line[:cut] + junk + line[cut:])
    parser.feed(junk)
    result = parser.finish()
    summarize(result, Context(seq_len=128, global_batch=8, warmup_steps=1))
    assert result.malformed_lines >= 0
