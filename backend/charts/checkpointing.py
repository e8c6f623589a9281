"""Checkpointing advisor figures: peak memory against k (measured runs, the fitted line with its
prediction band, the budget) and throughput against k (measured ratios, the fitted ratio with its
band), the recommended k marked on both."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

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


# How a value reads in a trace's hover: peak memory, or throughput against k = 0.
MEMORY_VALUE = "%{y:.3g} GiB"
RATIO_VALUE = "%{y:.3f} of k=0"


def _predicted(xs: list[int], ys: list[float], name: str, value: str) -> dict[str, object]:
    """The prediction over k, as a line."""
    return {
        "type": "scatter",
        "x": xs,
        "y": ys,
        "mode": "lines",
        "line": {"color": LINE, "width": 2},
        "name": name,
        "hovertemplate": f"k=%{{x}}: {value}<extra>predicted</extra>",
    }


def _measured(points: Sequence[tuple[int, float | None, str]], value: str) -> dict[str, object]:
    """The measured runs, (k, value, label) each, as points."""
    return {
        "type": "scatter",
        "x": [p[0] for p in points],
        "y": [p[1] for p in points],
        "mode": "markers",
        "marker": {"color": POINTS, "size": 9, "line": {"width": 1, "color": "#fff"}},
        "name": "measured runs",
        "text": plain_all(p[2] for p in points),
        "hovertemplate": f"%{{text}}<br>k=%{{x}}: {value}<extra></extra>",
    }


def _layout(result: CheckpointingAdvice, y_title: dict[str, str], **y_axis: str) -> dict[str, object]:
    n_layers = result.advice.n_layers
    return {
        "xaxis": {"title": {"text": f"Checkpointed layers k (of {n_layers})"}, "dtick": _dtick(n_layers)},
        "yaxis": {"title": y_title, **y_axis},
        "shapes": _chosen_line(result),
    }


def _title(result: CheckpointingAdvice, what: str) -> str:
    return chart_title(what, release=result.release, cluster=result.cluster, extra=result.workload)


def memory_vs_k(result: CheckpointingAdvice) -> go.Figure:
    a = result.advice
    level = f"{a.level:.0%}"
    title = _title(result, "Peak memory vs checkpointed layers")
    xs = [row.ckpt_layers for row in a.table]
    traces: list[dict[str, object]] = _band(
        xs, [r.low_gib for r in a.table], [r.high_gib for r in a.table], f"{level} prediction interval"
    )
    traces.append(
        _predicted(xs, [r.peak_memory_gib for r in a.table], plain(f"predicted ({a.basis})"), MEMORY_VALUE)
    )
    measured = [r for r in result.runs if r.peak_memory_gib is not None]
    if measured:
        traces.append(
            _measured(
                [
                    (r.ckpt_layers, r.peak_memory_gib, f"run {r.id}, {r.release}, {r.variant}")
                    for r in measured
                ],
                MEMORY_VALUE,
            )
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
    return build_figure(
        traces, title, layout=_layout(result, {"text": "Peak memory (GiB)"}, rangemode="tozero")
    )


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
    title = _title(result, "Throughput vs checkpointed layers")
    xs = [row.ckpt_layers for row in a.table]
    traces: list[dict[str, object]] = _band(
        xs,
        [r.throughput_ratio_low for r in a.table],
        [r.throughput_ratio_high for r in a.table],
        f"{a.level:.0%} interval of the ratio",
    )
    traces.append(_predicted(xs, [r.throughput_ratio for r in a.table], "predicted", RATIO_VALUE))
    points = measured_ratios(result)
    if points:
        traces.append(_measured(points, RATIO_VALUE))
    return build_figure(traces, title, layout=_layout(result, {"text": "Throughput relative to k = 0"}))


def _dtick(n_layers: int) -> int:
    return max(1, n_layers // 16)


def advisor_charts(result: CheckpointingAdvice) -> list[tuple[str, go.Figure]]:
    """The advisor's figures of one cell by kind, in order: the report and the release page show these."""
    return [("memory", memory_vs_k(result)), ("throughput", throughput_vs_k(result))]
