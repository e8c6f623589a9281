"""Checkpointing advisor figures: peak memory against k (measured runs, the fitted line with its
prediction band, the budget) and throughput against k (measured ratios, the fitted ratio with its
band), the recommended k marked on both."""

from __future__ import annotations

import statistics
from collections import defaultdict

import plotly.graph_objects as go

from ablate.backend.charts._common import plain, plain_all
from ablate.backend.charts.layout import build_figure, chart_title
from ablate.backend.services.advice import CheckpointingAdvice

BAND = "rgba(31, 119, 180, 0.18)"
LINE = "#1f77b4"
POINTS = "#ff7f0e"
BUDGET = "#d62728"
CHOSEN = "#2ca02c"


def _band(xs: list[int], low: list[float], high: list[float], name: str) -> list[dict[str, object]]:
    return [
        {
            "type": "scatter",
            "x": xs,
            "y": high,
            "mode": "lines",
            "line": {"width": 0},
            "showlegend": False,
            "hoverinfo": "skip",
            "name": f"{name} high",
        },
        {
            "type": "scatter",
            "x": xs,
            "y": low,
            "mode": "lines",
            "line": {"width": 0},
            "fill": "tonexty",
            "fillcolor": BAND,
            "name": name,
            "hoverinfo": "skip",
        },
    ]


def _chosen_line(result: CheckpointingAdvice) -> list[dict[str, object]]:
    k = result.advice.recommended_ckpt_layers
    if k is None:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": k,
            "x1": k,
            "y0": 0,
            "y1": 1,
            "line": {"color": CHOSEN, "dash": "dot", "width": 2},
        }
    ]


def memory_vs_k(result: CheckpointingAdvice) -> go.Figure:
    a = result.advice
    level = f"{a.level:.0%}"
    title = chart_title(
        "Peak memory vs checkpointed layers",
        release=result.release,
        cluster=result.cluster,
        extra=result.workload,
    )
    xs = [row.ckpt_layers for row in a.table]
    traces: list[dict[str, object]] = _band(
        xs, [r.low_gib for r in a.table], [r.high_gib for r in a.table], f"{level} prediction interval"
    )
    traces.append(
        {
            "type": "scatter",
            "x": xs,
            "y": [r.peak_memory_gib for r in a.table],
            "mode": "lines",
            "line": {"color": LINE, "width": 2},
            "name": plain(f"predicted ({a.basis})"),
            "hovertemplate": "k=%{x}: %{y:.3g} GiB<extra>predicted</extra>",
        }
    )
    measured = [r for r in result.runs if r.peak_memory_gib is not None]
    if measured:
        traces.append(
            {
                "type": "scatter",
                "x": [r.ckpt_layers for r in measured],
                "y": [r.peak_memory_gib for r in measured],
                "mode": "markers",
                "marker": {"color": POINTS, "size": 9, "line": {"width": 1, "color": "#fff"}},
                "name": "measured runs",
                "text": plain_all(f"run {r.id}, {r.release}, {r.variant}" for r in measured),
                "hovertemplate": "%{text}<br>k=%{x}: %{y:.3g} GiB<extra></extra>",
            }
        )
    traces.append(
        {
            "type": "scatter",
            "x": [xs[0], xs[-1]],
            "y": [a.memory_budget_gib] * 2,
            "mode": "lines",
            "line": {"color": BUDGET, "dash": "dash", "width": 2},
            "name": f"budget {a.memory_budget_gib:.4g} GiB ({a.device_memory_gib:.4g} x {a.utilisation:g})",
        }
    )
    layout = {
        "xaxis": {"title": {"text": f"Checkpointed layers k (of {a.n_layers})"}, "dtick": _dtick(a.n_layers)},
        "yaxis": {"title": {"text": "Peak memory (GiB)"}, "rangemode": "tozero"},
        "shapes": _chosen_line(result),
    }
    return build_figure(traces, title, layout=layout)


def measured_ratios(result: CheckpointingAdvice) -> list[tuple[int, float, str]]:
    """(k, step time at k = 0 over this run's, label): one per run whose group has k = 0 runs."""
    base: dict[str, list[float]] = defaultdict(list)
    for r in result.runs:
        if r.ckpt_layers == 0 and r.step_time_s:
            base[r.group].append(r.step_time_s)
    out = []
    for r in result.runs:
        if r.step_time_s and base.get(r.group):
            out.append(
                (r.ckpt_layers, statistics.median(base[r.group]) / r.step_time_s, f"run {r.id}, {r.group}")
            )
    return out


def throughput_vs_k(result: CheckpointingAdvice) -> go.Figure:
    a = result.advice
    title = chart_title(
        "Throughput vs checkpointed layers",
        release=result.release,
        cluster=result.cluster,
        extra=result.workload,
    )
    xs = [row.ckpt_layers for row in a.table]
    traces: list[dict[str, object]] = _band(
        xs,
        [r.throughput_ratio_low for r in a.table],
        [r.throughput_ratio_high for r in a.table],
        f"{a.level:.0%} interval of the ratio",
    )
    traces.append(
        {
            "type": "scatter",
            "x": xs,
            "y": [r.throughput_ratio for r in a.table],
            "mode": "lines",
            "line": {"color": LINE, "width": 2},
            "name": "predicted",
            "hovertemplate": "k=%{x}: %{y:.3f} of k=0<extra>predicted</extra>",
        }
    )
    points = measured_ratios(result)
    if points:
        traces.append(
            {
                "type": "scatter",
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "mode": "markers",
                "marker": {"color": POINTS, "size": 9, "line": {"width": 1, "color": "#fff"}},
                "name": "measured runs",
                "text": plain_all(p[2] for p in points),
                "hovertemplate": "%{text}<br>k=%{x}: %{y:.3f} of k=0<extra></extra>",
            }
        )
    layout = {
        "xaxis": {"title": {"text": f"Checkpointed layers k (of {a.n_layers})"}, "dtick": _dtick(a.n_layers)},
        "yaxis": {"title": {"text": "Throughput relative to k = 0"}},
        "shapes": _chosen_line(result),
    }
    return build_figure(traces, title, layout=layout)


def _dtick(n_layers: int) -> int:
    return max(1, n_layers // 16)
