"""From parsed step records to RunResult metrics and series (shared by every parser)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ablate.backend.domain.metrics import METRIC_UNITS
from ablate.workers.parsers.base import LogParser, ParseResult, StepRecord

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


def devices_of(workload: Mapping[str, Any], cluster: Mapping[str, Any]) -> int:
    """The devices a run's throughput is spread over: the workload's parallelism when it states one,
    else every device of the cluster."""
    parallel = (
        int(workload.get("data_parallel") or 1)
        * int(workload.get("tensor_parallel") or 1)
        * int(workload.get("pipeline_parallel") or 1)
    )
    devices = int(cluster.get("nodes") or 1) * int(cluster.get("devices_per_node") or 1)
    return parallel if parallel > 1 else devices


def context_for(workload: Mapping[str, Any], cluster: Mapping[str, Any], parser: LogParser) -> Context:
    """What :func:`summarize` needs from a workload and cluster definition and the parser's reading
    of the log (a log's own seq_len or batch wins: it is what ran)."""
    return Context(
        seq_len=parser.seq_len,
        global_batch=parser.global_batch,
        devices=devices_of(workload, cluster),
        peak_tflops_per_device=cluster.get("peak_tflops_per_device"),
        warmup_steps=int(workload.get("warmup_steps") or 0),
    )


def no_metrics_reason(parser_name: str, parsed: ParseResult, warmup_steps: int) -> str:
    """Why a log gave no metrics, with what the parser saw (for a failed run's error)."""
    why = f"parser {parser_name} found no metrics ({len(parsed.steps)} step records"
    why += f", {warmup_steps} warm-up dropped, {parsed.malformed_lines} malformed lines)"
    if parsed.malformed_examples:
        why += f"; first malformed {parsed.malformed_examples[0]}"
    return why


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
