"""Ablation figures: speed-up bars per workload, contribution waterfall, speed-up heatmap."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from ablate.backend.analysis.ablation import LadderAnalysis
from ablate.backend.charts._common import has_data, speedup_of, variant_order
from ablate.backend.charts.colors import TOTAL_COLOR, color_for, variant_colors
from ablate.backend.charts.layout import asymmetric_error, build_figure, chart_title, empty_figure
from ablate.backend.domain.formatting import pct, pvalue, ratio, ratio_ci
from ablate.backend.domain.metrics import describe_metric


def _baseline_name(ladders: Mapping[str, LadderAnalysis]) -> str:
    names = {lad.baseline for lad in ladders.values() if lad.baseline}
    return names.pop() if len(names) == 1 else "baseline"


def ablation_bars(
    ladders: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """Metric normalised to Base for every variant, grouped by workload, with bootstrap CI bars.

    ``ladders`` maps workload -> ladder analysis (same metric for all). One trace per variant.
    """
    first = next(iter(ladders.values()), None)
    label = describe_metric(first.metric, first.unit).label if first else "Throughput"
    title = chart_title(f"{label} vs Base", release=release, cluster=cluster)
    if not ladders or not has_data(ladders):
        return empty_figure(title)
    workloads = list(ladders)
    variants = variant_order(ladders.values())
    colors = dict(colors) if colors else variant_colors(variants)
    traces = []
    for name in variants:
        ys, lows, highs, hover = [], [], [], []
        for w in workloads:
            ladder = ladders[w]
            v = ladder.variant(name)
            r, lo, hi = speedup_of(ladder, v) if v else (None, None, None)
            ys.append(r)
            lows.append(lo)
            highs.append(hi)
            p = v.vs_baseline.p_value if v and v.vs_baseline else None
            n = v.summary.n if v else 0
            hover.append(f"{name}<br>{w}: {ratio_ci(r, lo, hi)}, n={n}, p={pvalue(p)}")
        traces.append(
            {
                "type": "bar",
                "name": name,
                "x": workloads,
                "y": ys,
                "error_y": asymmetric_error(ys, lows, highs),
                "marker": {"color": color_for(name, colors)},
                "hovertext": hover,
                "hoverinfo": "text",
                "texttemplate": "%{y:.2f}\u00d7",
                "textposition": "outside",
                "cliponaxis": False,
            }
        )
    # The parity line at 1x across the whole plot width (what ``add_hline`` draws).
    parity = {
        "type": "line",
        "xref": "x domain",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": 1.0,
        "y1": 1.0,
        "line": {"color": "#999999", "width": 1, "dash": "dot"},
    }
    layout = {
        "barmode": "group",
        "bargap": 0.2,
        "bargroupgap": 0.05,
        "shapes": [parity],
        "xaxis": {"title": {"text": "Workload"}},
        "yaxis": {
            "title": {"text": f"{label} normalised to {_baseline_name(ladders)} (\u00d7, >1 is better)"}
        },
    }
    return build_figure(traces, title, layout=layout)


def contribution_waterfall(
    ladder: LadderAnalysis | None,
    *,
    release: str | None = None,
    cluster: str | None = None,
    workload: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """Each rung's gain in percentage points of the baseline, stacked from 100% to the total.

    Steps are speed-up(i) - speed-up(i-1), so the floating bars add up exactly to the total
    bar; hover also shows each step's log share of the total gain (as computed by the analysis).
    """
    label = describe_metric(ladder.metric, ladder.unit).label if ladder else "Throughput"
    title = chart_title(
        f"{label}: contribution of each optimisation", release=release, cluster=cluster, extra=workload or ""
    )
    if ladder is None or ladder.baseline_missing or ladder.total is None or ladder.total.ratio is None:
        return empty_figure(title)
    chain = [v for v in ladder.variants if v.summary.n and (v.variant == ladder.baseline or v.vs_baseline)]
    if not chain or chain[0].variant != ladder.baseline:
        return empty_figure(title, "no data: the baseline is not the first rung")
    colors = dict(colors) if colors else variant_colors(v.variant for v in chain)
    traces = [
        {
            "type": "bar",
            "name": chain[0].variant,
            "x": [chain[0].variant],
            "y": [100.0],
            "marker": {"color": color_for(chain[0].variant, colors)},
            "hovertext": [f"{chain[0].variant}: 100%"],
            "hoverinfo": "text",
            "texttemplate": "100%",
            "textposition": "inside",
        }
    ]
    level = 100.0
    for v in chain[1:]:
        r, _, _ = speedup_of(ladder, v)
        new_level = 100.0 * r if r is not None else level
        delta = new_level - level
        share = f", {pct(v.share * 100, signed=False)} of the gain" if v.share is not None else ""
        step = v.step.ratio if v.step else None
        traces.append(
            {
                "type": "bar",
                "name": v.variant,
                "x": [v.variant],
                "y": [delta],
                "base": [level],
                "marker": {"color": color_for(v.variant, colors)},
                "hovertext": [f"{v.variant}: {delta:+.1f} pp (step {ratio(step)}{share})"],
                "hoverinfo": "text",
                "texttemplate": f"{delta:+.1f}",
                "textposition": "outside",
                "cliponaxis": False,
            }
        )
        level = new_level
    total = ladder.total.ratio * 100.0
    traces.append(
        {
            "type": "bar",
            "name": "Total",
            "x": ["Total"],
            "y": [total],
            "marker": {"color": TOTAL_COLOR},
            "hovertext": [f"Total: {pct(total, signed=False)} of {ladder.baseline}"],
            "hoverinfo": "text",
            "texttemplate": pct(total, signed=False),
            "textposition": "inside",
        }
    )
    layout = {
        "barmode": "overlay",
        "xaxis": {"title": {"text": "Variant"}, "type": "category"},
        "yaxis": {"title": {"text": f"{label} relative to {ladder.baseline} (%)"}},
    }
    return build_figure(traces, title, layout=layout)


def speedup_heatmap(
    ladders: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
) -> go.Figure:
    """Workload x variant grid of speed-up over Base; colour centred on 1 (blue better, red worse)."""
    first = next(iter(ladders.values()), None)
    label = describe_metric(first.metric, first.unit).label if first else "Throughput"
    title = chart_title(f"{label} speed-up over Base", release=release, cluster=cluster)
    if not ladders or not has_data(ladders):
        return empty_figure(title)
    workloads = list(ladders)
    variants = variant_order(ladders.values())
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for w in workloads:
        row: list[float | None] = []
        for name in variants:
            v = ladders[w].variant(name)
            row.append(speedup_of(ladders[w], v)[0] if v else None)
        z.append(row)
        text.append(["" if x is None else ratio(x) for x in row])
    heatmap = {
        "type": "heatmap",
        "z": z,
        "x": variants,
        "y": workloads,
        "text": text,
        "texttemplate": "%{text}",
        "colorscale": "RdBu",
        "zmid": 1.0,
        "colorbar": {"title": {"text": "Speed-up (\u00d7)"}},
        "hovertemplate": "%{y} · %{x}: %{z:.2f}\u00d7<extra></extra>",
        "xgap": 2,
        "ygap": 2,
    }
    layout = {
        "xaxis": {"title": {"text": "Variant"}, "type": "category"},
        "yaxis": {"title": {"text": "Workload"}, "type": "category", "autorange": "reversed"},
    }
    return build_figure([heatmap], title, layout=layout, legend=False)
