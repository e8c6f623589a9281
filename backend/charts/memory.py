"""Memory figures: peak memory bars per variant and workload, throughput vs memory scatter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from ablate.backend.analysis.ablation import LadderAnalysis
from ablate.backend.charts._common import has_data, plain, plain_all, plain_lines, variant_order
from ablate.backend.charts.colors import color_for, variant_colors
from ablate.backend.charts.layout import asymmetric_error, build_figure, chart_title, empty_figure
from ablate.backend.charts.repeats import (
    BARGAP,
    BARGROUPGAP,
    PointStyle,
    Repeats,
    pin_points_axes,
    point_traces,
)
from ablate.backend.domain.formatting import MEDIAN_DIGITS, num_ci, quantity
from ablate.backend.domain.metrics import describe_metric


def memory_bars(
    ladders: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
    colors: Mapping[str, str] | None = None,
    repeats: Repeats | None = None,
) -> go.Figure:
    """Median peak memory per variant, grouped by workload, with the t interval (log scale) of the median.

    ``ladders`` maps workload -> ladder analysis of a memory metric (e.g. peak_memory_gib); given
    ``repeats`` (workload -> variant -> (run id, value)), each run's value is a point over its bar.
    """
    first = next(iter(ladders.values()), None)
    mdef = describe_metric(first.metric, first.unit) if first else describe_metric("peak_memory_gib")
    title = chart_title(mdef.label, release=release, cluster=cluster)
    if not ladders or not has_data(ladders):
        return empty_figure(title)
    workloads = list(ladders)
    variants = variant_order(ladders.values())
    colors = dict(colors) if colors else variant_colors(variants)
    traces = []
    for name in variants:
        ys, lows, highs, hover = [], [], [], []
        for w in workloads:
            v = ladders[w].variant(name)
            s = v.summary if v else None
            ys.append(s.median if s else None)
            lows.append(s.ci_low if s else None)
            highs.append(s.ci_high if s else None)
            value = num_ci(ys[-1], lows[-1], highs[-1], unit=mdef.unit)
            hover.append(plain_lines(name, f"{w}: {value}, n={s.n if s else 0}"))
        traces.append(
            {
                "type": "bar",
                "name": plain(name),
                "x": plain_all(workloads),
                "y": ys,
                "error_y": asymmetric_error(ys, lows, highs),
                "marker": {"color": color_for(name, colors)},
                "hovertext": hover,
                "hoverinfo": "text",
                "legendgroup": plain(name),
            }
        )
    style = PointStyle(
        value_of=lambda _w, value: value,
        hover_of=lambda w, name, run_id, value, _y: plain_lines(
            name, f"{w}: run {run_id}: {quantity(value, mdef.unit, MEDIAN_DIGITS)}"
        ),
        color_of=lambda name: color_for(name, colors),
    )
    traces += point_traces(repeats, workloads, variants, style)
    layout: dict[str, Any] = {
        "barmode": "group",
        "bargap": BARGAP,
        "bargroupgap": BARGROUPGAP,
        "xaxis": {"title": {"text": "Workload"}},
        "yaxis": {"title": {"text": plain(mdef.axis_title())}, "rangemode": "tozero"},
    }
    if len(traces) > len(variants):  # points drawn
        layout = pin_points_axes(layout, len(workloads))
    return build_figure(traces, title, layout=layout)


def throughput_vs_memory(
    throughput: Mapping[str, LadderAnalysis],
    memory: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """One point per variant and workload: median memory (x) against median throughput (y).

    Both mappings are workload -> ladder analysis; only workloads present in both are drawn.
    """
    t_first = next(iter(throughput.values()), None)
    m_first = next(iter(memory.values()), None)
    t_def = (
        describe_metric(t_first.metric, t_first.unit)
        if t_first
        else describe_metric("throughput_tokens_per_s")
    )
    m_def = describe_metric(m_first.metric, m_first.unit) if m_first else describe_metric("peak_memory_gib")
    title = chart_title(f"{t_def.label} vs {m_def.label.lower()}", release=release, cluster=cluster)
    workloads = [w for w in throughput if w in memory]
    common = {w: throughput[w] for w in workloads}
    if not workloads or not has_data(common):
        return empty_figure(title)
    variants = variant_order([*common.values(), *(memory[w] for w in workloads)])
    colors = dict(colors) if colors else variant_colors(variants)
    traces = []
    for name in variants:
        xs, xl, xh, ys, yl, yh, labels, hover = [], [], [], [], [], [], [], []
        for w in workloads:
            tv, mv = throughput[w].variant(name), memory[w].variant(name)
            if not tv or not mv or not tv.summary.n or not mv.summary.n:
                continue
            xs.append(mv.summary.median)
            xl.append(mv.summary.ci_low)
            xh.append(mv.summary.ci_high)
            ys.append(tv.summary.median)
            yl.append(tv.summary.ci_low)
            yh.append(tv.summary.ci_high)
            labels.append(w)
            hover.append(
                plain_lines(
                    name,
                    w,
                    f"{m_def.label}: {quantity(xs[-1], m_def.unit, MEDIAN_DIGITS)}",
                    f"{t_def.label}: {quantity(ys[-1], t_def.unit, MEDIAN_DIGITS)}",
                )
            )
        if not xs:
            continue
        traces.append(
            {
                "type": "scatter",
                "name": plain(name),
                "x": xs,
                "y": ys,
                "mode": "markers",
                "error_x": asymmetric_error(xs, xl, xh),
                "error_y": asymmetric_error(ys, yl, yh),
                "marker": {
                    "color": color_for(name, colors),
                    "size": 11,
                    "line": {"width": 1, "color": "#ffffff"},
                },
                "text": plain_all(labels),
                "hovertext": hover,
                "hoverinfo": "text",
            }
        )
    layout = {
        "xaxis": {"title": {"text": plain(m_def.axis_title())}},
        "yaxis": {"title": {"text": plain(t_def.axis_title())}},
    }
    return build_figure(traces, title, layout=layout)
