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


def test_deepspeed_timer_0_7_epoch_step_form() -> None:
    """DeepSpeed 0.7-0.9: "E/S, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...", no global_step."""
    parsed, m, series, live = _parse(
        "deepspeed", "deepspeed_v07_gpt2.log", {"seq_len": 1024}, devices=4, warmup_steps=1
    )
    # Epoch 1 restarts the printed step count; its steps follow epoch 0's last (20).
    assert [s.step for s in parsed.steps] == [2, 4, 8, 14, 20, 22, 24] and live == [2, 4, 8, 14, 20, 22, 24]
    # nan rate, "97.4.1", cut-short line, unknown unit "XB", unit-less memory, a timer line without a step
    assert parsed.malformed_lines == 6
    reasons = "\n".join(parsed.malformed_examples)
    assert "line 9: CurrSamplesPerSec 'nan' is not a number" in reasons
    assert "'97.4.1' is not a number" in reasons and "cut short" in reasons
    assert "unknown memory unit 'XB'" in reasons and "'6.9' is not a size with a unit" in reasons
    assert parsed.steps[0].values["throughput_samples_per_s"] == 88.412  # RunningAvg "-inf" is not used
    assert m["throughput_samples_per_s"] == (pytest.approx(98.0), "samples/s")
    assert m["throughput_tokens_per_s"] == (
        pytest.approx(98.0 * 1024),
        "tokens/s",
    )  # seq_len from the workload
    assert m["step_time_s"][0] == pytest.approx(32 / 98.0)  # train_batch_size from DeepSpeed's config dump
    assert m["peak_memory_gib"] == (pytest.approx(6.91), "GiB")
    assert series["peak_memory_gib"][1][3] == pytest.approx(7040 / 1024)  # "7040MB" beside lines in GB
    assert series["throughput_tokens_per_s"][0][0] == 2


def test_deepspeed_timer_older_samplespersec_form() -> None:
    parsed, m, _, _ = _parse("deepspeed", "deepspeed_v05_samplespersec.log", {"seq_len": 512})
    assert [s.step for s in parsed.steps] == [10, 20, 40]
    assert parsed.malformed_lines == 1 and "SamplesPerSec '-inf'" in parsed.malformed_examples[0]
    assert m["throughput_samples_per_s"][0] == pytest.approx(63.771205)
    assert m["throughput_tokens_per_s"][0] == pytest.approx(63.771205 * 512)
    assert m["peak_memory_gib"][0] == pytest.approx(10.15)
    assert "step_time_s" not in m  # no global batch in the workload or the log: not guessed


@pytest.mark.parametrize(
    "line",
    [
        "[2026-11-02 09:14:20,507] [INFO] [logging.py:96:log_dist] [Rank 0] 3/7, "
        "RunningAvgSamplesPerSec=50.5, CurrSamplesPerSec=51.0, MemAllocated=1.5GB, MaxMemAllocated=2.5GiB",
        "1: [2026-11-02 09:14:20,507] [INFO] [timer.py:199:stop] epoch=3/micro_step=70/global_step=7, "
        "RunningAvgSamplesPerSec=50.5, CurrSamplesPerSec=51.0, MemAllocated=1.5GB, MaxMemAllocated=2560MB",
    ],
)
def test_deepspeed_timer_prefixes(line: str) -> None:
    parser = get_parser("deepspeed", {"seq_len": 100})
    (rec,) = parser.feed(line)
    assert rec.step == 7 and rec.values["throughput_tokens_per_s"] == pytest.approx(5100.0)
    assert rec.values["peak_memory_gib"] == pytest.approx(2.5)


def test_deepspeed_seq_len_stated_after_the_first_steps() -> None:
    parser = get_parser("deepspeed", {})
    parser.feed(
        "[timer.py:197:stop] 0/1, RunningAvgSamplesPerSec=-inf, CurrSamplesPerSec=10.0, "
        "MemAllocated=0.0GB, MaxMemAllocated=0.0GB"
    )
    parser.feed("  seq_length ...................................... 2048")
    parser.feed("  global_batch_size ............................... None")
    parsed = parser.finish()
    assert parsed.steps[0].values == {"throughput_samples_per_s": 10.0, "throughput_tokens_per_s": 20480.0}
    assert parser.global_batch is None  # "None" in a dump states nothing


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


def test_megatron_neox_style_lines() -> None:
    """lm_loss with an underscore, approx flops per GPU with a unit, samples/sec before the iteration."""
    parsed, m, series, _ = _parse("megatron", "neox_iterations.log", {}, devices=16, warmup_steps=1)
    assert [s.step for s in parsed.steps] == [10, 20, 30, 50, 70, 90]  # the validation line is not a step
    assert parsed.total_steps == 200
    # flops without a unit, samples/sec "64.3x1", a line cut before the elapsed time
    assert parsed.malformed_lines == 3
    assert "approx flops per GPU '113.0' is not a number with a FLOPS unit" in parsed.malformed_examples[0]
    tflops = {s.step: s.values["tflops_per_device"] for s in parsed.steps}
    # TFLOPS, "113.05 TFLOPs", "112979.6gflops" and "0.1132PFLOPS" all in TFLOPS
    assert tflops == pytest.approx({10: 101.4, 20: 112.9, 30: 113.05, 50: 112.9796, 70: 113.2, 90: 113.2})
    assert m["tflops_per_device"] == (pytest.approx(113.05), "TFLOPS")
    assert m["throughput_samples_per_s"] == (pytest.approx(64.205), "samples/s")  # as printed
    assert m["throughput_tokens_per_s"][0] == pytest.approx(
        64.205 * 2048
    )  # seq_length from the argument dump
    assert m["step_time_s"][0] == pytest.approx(1.9936)
    assert m["loss"][0] == pytest.approx(7.301234)
    assert series["loss"][0] == [10, 20, 30, 70, 90]  # the nan loss of step 50 is left out, its timing kept
    assert 50 in series["step_time_s"][0]


def test_megatron_deepspeed_lines() -> None:
    parsed, m, _, _ = _parse(
        "megatron", "megatron_deepspeed_gpt.log", {"seq_len": 1024}, devices=64, warmup_steps=1
    )
    assert [s.step for s in parsed.steps] == [1, 2, 3, 5] and parsed.total_steps == 1000
    assert parsed.malformed_lines == 1 and "samples per second 'inf'" in parsed.malformed_examples[0]
    assert m["throughput_samples_per_s"][0] == pytest.approx(33.918)
    assert m["throughput_tokens_per_s"][0] == pytest.approx(33.918 * 4096)  # the log's seq length wins
    assert m["throughput_tokens_per_s_per_device"] == (pytest.approx(2170.752), "tokens/s/device")  # tgs
    assert m["tflops_per_device"][0] == pytest.approx(66.79)
    assert m["step_time_s"][0] == pytest.approx(15.0951)
    assert m["loss"][0] == pytest.approx(9.6504)
    assert m["peak_memory_gib"][0] == pytest.approx(41072.6 / 1024)


@pytest.mark.parametrize(
    ("flops", "tflops"),
    [("112.9TFLOPS", 112.9), ("112.9TFLOPs", 112.9), ("112.9tflops", 112.9), ("980.0GFLOPS", 0.98)],
)
def test_megatron_flops_units(flops: str, tflops: float) -> None:
    parser = get_parser("megatron", {})
    (rec,) = parser.feed(
        f" iteration 3/ 9 | elapsed time per iteration (ms): 500.0 | approx flops per GPU: {flops} |"
        " lm_loss: 2.5 |"
    )
    assert rec.values["tflops_per_device"] == pytest.approx(tflops) and rec.values["loss"] == 2.5


def test_mllog_tokens_from_sequence_length() -> None:
    """max_sequence_length logged after the first tracked_stats: every step still gets tokens/s."""
    parsed, m, series, _ = _parse("mllog", "mlperf_gpt3_seqlen.log", {}, warmup_steps=1)
    assert [s.step for s in parsed.steps] == [1536, 3072, 4608, 6144]
    # NaN, true and "50.9" throughput, no step in the metadata, truncated JSON; train_epoch_timing is not one
    assert parsed.malformed_lines == 5
    assert "throughput nan is not a finite number" in parsed.malformed_examples[0]
    assert series["throughput_tokens_per_s"] == (
        [1536, 3072, 4608, 6144],
        pytest.approx([48.12 * 2048, 50.40 * 2048, 50.61 * 2048, 50.52 * 2048]),
    )
    assert m["throughput_tokens_per_s"] == (pytest.approx(50.52 * 2048), "tokens/s")
    assert m["step_time_s"][0] == pytest.approx(1536 / 50.52)
    assert m["loss"][0] == pytest.approx(6.61) and m["elapsed_s"][0] == pytest.approx(120.08)


@pytest.mark.parametrize("key", ["max_sequence_length", "seq_length"])
def test_mllog_sequence_length_keys(key: str) -> None:
    parser = get_parser("mllog", {"seq_len": 512})
    head = ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", '
    parser.feed(head + f'"key": "{key}", "value": 4096, "metadata": {{}}}}')
    (rec,) = parser.feed(
        head + '"key": "tracked_stats", "value": {"throughput": 3.0}, "metadata": {"step": 8}}'
    )
    assert rec.values["throughput_tokens_per_s"] == 3.0 * 4096  # the log's length wins over the workload's
    parser.feed(head + f'"key": "{key}", "value": -1, "metadata": {{}}}}')
    assert parser.finish().malformed_examples[0].startswith(f"line 3: {key} -1 is not a positive number")


@pytest.mark.parametrize("name", ["jsonl", "mllog", "deepspeed", "megatron", "regex"])
def test_log_without_metrics_finds_nothing(name: str) -> None:
    parsed, m, series, live = _parse(name, "no_metrics.log", LJPERF_OPTIONS if name == "regex" else {})
    assert parsed.steps == [] and parsed.summary == {} and live == []
    assert parsed.malformed_lines == 0 and m == {} and series == {}


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
