"""From parsed step records to RunResult metrics and series (shared by every parser)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ablate.backend.domain.metrics import METRIC_UNITS
from ablate.workers.parsers.base import ParseResult, StepRecord

# Per-step values summarised by the median of the measured steps; the rest: last value / maximum.
_MEDIAN = (
    "step_time_s",
    "throughput_tokens_per_s",
    "throughput_tokens_per_s_per_device",
    "throughput_samples_per_s",
    "tflops_per_device",
)
_MAX = ("peak_memory_gib", "peak_memory_reserved_gib")


@dataclass(frozen=True)
class Context:
    seq_len: int | None = None
    global_batch: int | None = None
    devices: int = 1
    peak_tflops_per_device: float | None = None
    warmup_steps: int = 0


def _values(steps: list[StepRecord], key: str) -> list[float]:
    return [s.values[key] for s in steps if key in s.values]


def summarize(
    parsed: ParseResult, ctx: Context
) -> tuple[dict[str, tuple[float, str]], dict[str, tuple[list[int], list[float]]]]:
    """Metrics (warm-up records dropped, medians of the rest) and per-step series (all records)."""
    measured = parsed.steps[ctx.warmup_steps :] if ctx.warmup_steps > 0 else parsed.steps
    found: dict[str, float] = {}
    for key in _MEDIAN:
        vals = _values(measured, key)
        if vals:
            found[key] = statistics.median(vals)
    for key in _MAX:
        vals = _values(measured, key)
        if vals:
            found[key] = max(vals)
    losses = _values(measured, "loss")
    if losses:
        found["loss"] = losses[-1]
    # Custom per-step metrics (regex/jsonl mappings): median, like the rates.
    for key in sorted({k for s in measured for k in s.values} - set(found)):
        found[key] = statistics.median(_values(measured, key))
    # Whole-run statements of the log fill what the steps did not give.
    for key, value in parsed.summary.items():
        found.setdefault(key, value)
    _derive(found, ctx)
    units = {**parsed.units, **METRIC_UNITS}
    metrics = {k: (v, units.get(k, "")) for k, v in found.items()}
    series: dict[str, tuple[list[int], list[float]]] = {}
    names = sorted({k for s in parsed.steps for k in s.values})
    for name in names:
        pts = [(s.step, s.values[name]) for s in parsed.steps if name in s.values]
        series[name] = ([p[0] for p in pts], [p[1] for p in pts])
    return metrics, series


def _derive(m: dict[str, float], ctx: Context) -> None:
    """Fill the metrics that follow from the others and the workload (tokens = samples * seq_len)."""
    tokens_per_step = ctx.global_batch * ctx.seq_len if ctx.global_batch and ctx.seq_len else None
    dev = max(1, ctx.devices)
    if "throughput_tokens_per_s" not in m:
        if "throughput_tokens_per_s_per_device" in m:
            m["throughput_tokens_per_s"] = m["throughput_tokens_per_s_per_device"] * dev
        elif "throughput_samples_per_s" in m and ctx.seq_len:
            m["throughput_tokens_per_s"] = m["throughput_samples_per_s"] * ctx.seq_len
        elif "step_time_s" in m and tokens_per_step:
            m["throughput_tokens_per_s"] = tokens_per_step / m["step_time_s"]
    tps = m.get("throughput_tokens_per_s")
    if tps is not None:
        m.setdefault("throughput_tokens_per_s_per_device", tps / dev)
        if ctx.seq_len:
            m.setdefault("throughput_samples_per_s", tps / ctx.seq_len)
        if tokens_per_step and tps > 0:
            m.setdefault("step_time_s", tokens_per_step / tps)
    if "throughput_samples_per_s" in m and ctx.global_batch and m["throughput_samples_per_s"] > 0:
        m.setdefault("step_time_s", ctx.global_batch / m["throughput_samples_per_s"])
    if "tflops_per_device" in m and ctx.peak_tflops_per_device:
        m.setdefault("mfu", m["tflops_per_device"] / ctx.peak_tflops_per_device)
