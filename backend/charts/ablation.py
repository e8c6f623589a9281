"""Ablation figures: speed-up bars per workload, contribution waterfall, speed-up heatmap, and the
factor effects of a factorial design."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from ablate.backend.analysis.ablation import LadderAnalysis, VariantResult
from ablate.backend.analysis.factorial import FactorialAnalysis
from ablate.backend.charts._common import has_data, plain, plain_all, plain_lines, speedup_of, variant_order
from ablate.backend.charts.colors import TOTAL_COLOR, color_for, variant_colors
from ablate.backend.charts.layout import asymmetric_error, build_figure, chart_title, empty_figure
from ablate.backend.charts.repeats import (
    BARGAP,
    BARGROUPGAP,
    PointStyle,
    Repeats,
    RunValue,
    pin_points_axes,
    point_traces,
)
from ablate.backend.domain.formatting import pct, pvalue, quantity, qvalue, ratio, ratio_ci
from ablate.backend.domain.metrics import describe_metric


def _baseline_name(ladders: Mapping[str, LadderAnalysis]) -> str:
    names = {lad.baseline for lad in ladders.values() if lad.baseline}
    return names.pop() if len(names) == 1 else "baseline"


def _baseline_geomean(ladder: LadderAnalysis, runs: Sequence[RunValue]) -> float | None:
    values = [v for _, v in runs if v > 0]
    if ladder.baseline_missing or not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _metric_label(analysis: LadderAnalysis | FactorialAnalysis | None) -> str:
    """The axis label of the analysed metric (throughput when there is nothing to read it from)."""
    return describe_metric(analysis.metric, analysis.unit).label if analysis else "Throughput"


def _parity_line(axis: str) -> dict[str, Any]:
    """The no-change line at 1x on ``axis`` ("x" or "y") across the whole plot (as ``add_hline`` /
    ``add_vline`` draw it)."""
    across = "y" if axis == "x" else "x"
    return {
        "type": "line",
        f"{across}ref": f"{across} domain",
        f"{across}0": 0,
        f"{across}1": 1,
        f"{axis}ref": axis,
        f"{axis}0": 1.0,
        f"{axis}1": 1.0,
        "line": {"color": "#999999", "width": 1, "dash": "dot"},
    }


def _speedup_bar(ladders: Mapping[str, LadderAnalysis], name: str, color: str) -> dict[str, Any]:
    """The bar trace of variant ``name``: its speed-up over the baseline on each workload."""
    ys, lows, highs, hover = [], [], [], []
    for w, ladder in ladders.items():
        v = ladder.variant(name)
        r, lo, hi = speedup_of(ladder, v) if v else (None, None, None)
        ys.append(r)
        lows.append(lo)
        highs.append(hi)
        p = v.vs_baseline.p_value if v and v.vs_baseline else None
        n = v.summary.n if v else 0
        hover.append(plain_lines(name, f"{w}: {ratio_ci(r, lo, hi)}, n={n}, p={pvalue(p)}"))
    return {
        "type": "bar",
        "name": plain(name),
        "x": plain_all(ladders),
        "y": ys,
        "error_y": asymmetric_error(ys, lows, highs),
        "marker": {"color": color},
        "hovertext": hover,
        "hoverinfo": "text",
        "legendgroup": plain(name),
        # Inside the bar at its base: outside, the whisker of the interval strikes it through.
        "texttemplate": "%{y:.2f}\u00d7",
        "textposition": "inside",
        "insidetextanchor": "start",
        "cliponaxis": False,
    }


def _speedup_points(
    ladders: Mapping[str, LadderAnalysis],
    repeats: Repeats | None,
    variants: list[str],
    colors: dict[str, str],
) -> list[dict[str, Any]]:
    """Each run's own value over its workload's baseline geometric mean, as points over the bars."""
    bases = {
        w: _baseline_geomean(lad, (repeats or {}).get(w, {}).get(lad.baseline or "", ()))
        for w, lad in ladders.items()
    }

    def speedup(workload: str, value: float) -> float | None:
        base = bases[workload]
        if base is None or value <= 0:
            return None
        return value / base if ladders[workload].direction == "higher" else base / value

    unit = next(iter(ladders.values())).unit
    style = PointStyle(
        value_of=speedup,
        hover_of=lambda w, name, run_id, value, y: plain_lines(
            name, f"{w}: run {run_id}: {ratio(y)} ({quantity(value, unit, 4)})"
        ),
        color_of=lambda name: color_for(name, colors),
    )
    return point_traces(repeats, list(ladders), variants, style)


def ablation_bars(
    ladders: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
    colors: Mapping[str, str] | None = None,
    repeats: Repeats | None = None,
) -> go.Figure:
    """Metric normalised to Base for every variant, grouped by workload, with Welch t interval bars.

    ``ladders`` maps workload -> ladder analysis (same metric for all). One bar trace per variant,
    its value label inside the bar's base (clear of the interval's whisker), then, given
    ``repeats`` (workload -> variant -> (run id, value)), one trace of points per variant: each
    run's own value over the baseline's geometric mean, oriented like the bars (> 1 is better).
    """
    label = _metric_label(next(iter(ladders.values()), None))
    title = chart_title(f"{label} vs Base", release=release, cluster=cluster)
    if ladders and all(lad.baseline_missing for lad in ladders.values()):
        return empty_figure(title, f"no data: no succeeded {_baseline_name(ladders)} runs to compare with")
    if not ladders or not has_data(ladders):
        return empty_figure(title)
    variants = variant_order(ladders.values())
    colors = dict(colors) if colors else variant_colors(variants)
    traces = [_speedup_bar(ladders, name, color_for(name, colors)) for name in variants]
    traces += _speedup_points(ladders, repeats, variants, colors)
    layout: dict[str, Any] = {
        "barmode": "group",
        "bargap": BARGAP,
        "bargroupgap": BARGROUPGAP,
        "shapes": [_parity_line("y")],
        "xaxis": {"title": {"text": "Workload"}},
        "yaxis": {
            "title": {
                "text": plain(f"{label} normalised to {_baseline_name(ladders)} (\u00d7, >1 is better)")
            }
        },
    }
    if len(traces) > len(variants):  # points drawn
        layout = pin_points_axes(layout, len(ladders))
    return build_figure(traces, title, layout=layout)


def _waterfall_bar(name: str, y: float, color: str, hover: str, **rest: Any) -> dict[str, Any]:
    """One bar of the waterfall: its own category ``name``, ``hover`` as plain text; ``rest`` adds or
    overrides trace keys (the label's template and position, a floating bar's ``base``)."""
    return {
        "type": "bar",
        "name": plain(name),
        "x": [plain(name)],
        "y": [y],
        "marker": {"color": color},
        "hovertext": [plain(hover)],
        "hoverinfo": "text",
        "textposition": "inside",
        **rest,
    }


def _waterfall_steps(
    ladder: LadderAnalysis, chain: Sequence[VariantResult], colors: dict[str, str]
) -> list[dict[str, Any]]:
    """The floating bars after the first rung: each rung's gain over the one before, in pp."""
    traces = []
    level = 100.0
    for v in chain[1:]:
        r, _, _ = speedup_of(ladder, v)
        new_level = 100.0 * r if r is not None else level
        delta = new_level - level
        share = f", {pct(v.share * 100, signed=False)} of the gain" if v.share is not None else ""
        if v.skipped:
            share += f"; step across missing {', '.join(v.skipped)}"
        step = v.step.ratio if v.step else None
        hover = f"{v.variant}: {delta:+.1f} pp (step {ratio(step)}{share})"
        traces.append(
            _waterfall_bar(
                v.variant,
                delta,
                color_for(v.variant, colors),
                hover,
                base=[level],
                texttemplate=f"{delta:+.1f}",
                textposition="outside",
                cliponaxis=False,
            )
        )
        level = new_level
    return traces


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
    label = _metric_label(ladder)
    title = chart_title(
        f"{label}: contribution of each optimisation", release=release, cluster=cluster, extra=workload or ""
    )
    if ladder is not None and ladder.baseline_missing:
        return empty_figure(
            title, f"no data: no succeeded {ladder.baseline or 'baseline'} runs to compare with"
        )
    if ladder is None or ladder.total is None or ladder.total.ratio is None:
        return empty_figure(title)
    chain = [v for v in ladder.variants if v.summary.n and (v.variant == ladder.baseline or v.vs_baseline)]
    if not chain or chain[0].variant != ladder.baseline:
        return empty_figure(title, "no data: the baseline is not the first rung")
    colors = dict(colors) if colors else variant_colors(v.variant for v in chain)
    first = chain[0].variant
    traces = [_waterfall_bar(first, 100.0, color_for(first, colors), f"{first}: 100%", texttemplate="100%")]
    traces += _waterfall_steps(ladder, chain, colors)
    total = ladder.total.ratio * 100.0
    total_text = pct(total, signed=False)
    hover = f"Total: {total_text} of {ladder.baseline}"
    traces.append(_waterfall_bar("Total", total, TOTAL_COLOR, hover, texttemplate=total_text))
    layout = {
        "barmode": "overlay",
        "xaxis": {"title": {"text": "Variant"}, "type": "category"},
        "yaxis": {"title": {"text": plain(f"{label} relative to {ladder.baseline} (%)")}},
    }
    return build_figure(traces, title, layout=layout)


# Marks of the heatmap's cells whose speed-up the test does not support, explained under the chart.
NOT_SIGNIFICANT = "n.s."
NOT_TESTABLE = "n/t"


def _heatmap_cell(ladder: LadderAnalysis, name: str, workload: str) -> tuple[float | None, str, str]:
    """(speed-up, cell text, hover) of one cell; the text carries the n.s./n/t mark."""
    v = ladder.variant(name)
    if v is None:
        return None, "", plain(f"{workload} · {name}: no runs")
    r, lo, hi = speedup_of(ladder, v)
    n = v.summary.n
    if r is None:
        return None, "", plain(f"{workload} · {name}: {ratio(None)}, n={n}")
    c = v.vs_baseline
    if v.variant == ladder.baseline or c is None:
        return r, ratio(r), plain(f"{workload} · {name}: {ratio(r)} (the baseline), n={n}")
    if not c.testable:
        mark, verdict = NOT_TESTABLE, "not testable (fewer than 2 runs a side)"
    elif c.significant:
        mark, verdict = "", f"significant at q < {c.alpha:g}"
    else:
        mark, verdict = NOT_SIGNIFICANT, f"not significant (q \u2265 {c.alpha:g})"
    # Hover text is drawn as plotly markup: names and "q < ..." as plain text.
    hover = plain_lines(f"{workload} · {name}: {ratio_ci(r, lo, hi)}, n={n}, q={qvalue(c.q_value)}", verdict)
    return r, f"{ratio(r)} {mark}".strip(), hover


def _veil(row: int, col: int) -> dict[str, Any]:
    """A translucent white veil over a heatmap cell: its colour reads as "no supported change"."""
    return {
        "type": "rect",
        "xref": "x",
        "yref": "y",
        "x0": col - 0.5,
        "x1": col + 0.5,
        "y0": row - 0.5,
        "y1": row + 0.5,
        "fillcolor": "rgba(255,255,255,0.55)",
        "line": {"width": 0},
        "layer": "above",
    }


def _heatmap_trace(
    ladders: Mapping[str, LadderAnalysis], variants: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The heatmap trace (workloads down, variants across) and the veils over its unsupported cells."""
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    hover: list[list[str]] = []
    veils: list[dict[str, Any]] = []
    for row, (w, ladder) in enumerate(ladders.items()):
        cells = [_heatmap_cell(ladder, name, w) for name in variants]
        z.append([c[0] for c in cells])
        text.append([c[1] for c in cells])
        hover.append([c[2] for c in cells])
        veils += [
            _veil(row, col) for col, c in enumerate(cells) if c[1].endswith((NOT_SIGNIFICANT, NOT_TESTABLE))
        ]
    heatmap = {
        "type": "heatmap",
        "z": z,
        "x": plain_all(variants),
        "y": plain_all(ladders),
        "text": text,
        "texttemplate": "%{text}",
        "colorscale": "RdBu",
        "zmid": 1.0,
        "colorbar": {"title": {"text": "Speed-up (\u00d7)"}},
        "hovertext": hover,
        "hoverinfo": "text",
        "xgap": 2,
        "ygap": 2,
    }
    return heatmap, veils


def _veil_note(alpha: float) -> dict[str, Any]:
    """What the greyed cells' marks mean, as an annotation."""
    return {
        "text": (
            f"Greyed cells \u2014 {NOT_SIGNIFICANT}: change not significant "
            f"(q \u2265 {alpha:g}, the hover gives its interval); "
            f"{NOT_TESTABLE}: fewer than 2 runs a side, not testable"
        ),
        # Above the plot, under the title: below it, long rotated variant names run into it.
        "xref": "paper",
        "yref": "paper",
        "x": 0.0,
        "y": 1.0,
        "xanchor": "left",
        "yanchor": "bottom",
        "yshift": 4,
        "showarrow": False,
        "font": {"size": 11, "color": "#555555"},
    }


def speedup_heatmap(
    ladders: Mapping[str, LadderAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
) -> go.Figure:
    """Workload x variant grid of speed-up over Base; colour centred on 1 (blue better, red worse).

    Each cell's hover gives the speed-up's interval, n and adjusted q-value; a cell whose change the
    test does not support says so in the cell ("n.s.", or "n/t" when there are too few runs to test)
    and is greyed over, with a note under the chart saying what the marks mean.
    """
    first = next(iter(ladders.values()), None)
    title = chart_title(f"{_metric_label(first)} speed-up over Base", release=release, cluster=cluster)
    if first is None or not has_data(ladders):
        return empty_figure(title)
    heatmap, veils = _heatmap_trace(ladders, variant_order(ladders.values()))
    layout: dict[str, Any] = {
        "xaxis": {"title": {"text": "Variant"}, "type": "category"},
        "yaxis": {"title": {"text": "Workload"}, "type": "category", "autorange": "reversed"},
        "shapes": veils,
    }
    if veils:
        layout["annotations"] = [_veil_note(first.alpha)]
    return build_figure([heatmap], title, layout=layout, legend=False)


def _effect_label(factors: tuple[str, ...]) -> str:
    return factors[0] if len(factors) == 1 else " \u00d7 ".join(factors)


def _bounds(trace: dict) -> list[float]:
    """Interval ends of a trace from its error bars (x + plus, x - minus)."""
    err = trace.get("error_x") or {}
    out = []
    for x, plus, minus in zip(trace["x"], err.get("array") or [], err.get("arrayminus") or [], strict=False):
        if x is not None and plus is not None:
            out.append(x + plus)
        if x is not None and minus is not None:
            out.append(x - minus)
    return out


def factorial_effects(
    analyses: Mapping[str, FactorialAnalysis],
    *,
    release: str | None = None,
    cluster: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """Main effects and two-way interactions of a factorial design with their intervals.

    ``analyses`` maps workload -> factorial analysis (same metric). One trace per workload: a
    marker per effect (x: the effect as a factor, > 1 better; interactions at full size) with its
    t interval as error bars, effects listed top to bottom, and the no-effect line at 1x.
    """
    label = _metric_label(next(iter(analyses.values()), None))
    title = chart_title(f"{label}: factor effects", release=release, cluster=cluster)
    usable = {w: fa for w, fa in analyses.items() if fa.main_effects}
    if not usable:
        return empty_figure(title, "no effects: the design is incomplete")
    names: list[str] = []
    for fa in usable.values():
        for effect in (*fa.main_effects, *fa.interactions):
            if _effect_label(effect.factors) not in names:
                names.append(_effect_label(effect.factors))
    colors = dict(colors) if colors else variant_colors(usable)
    traces: list[dict[str, Any]] = []
    for workload, fa in usable.items():
        effects = {_effect_label(e.factors): e for e in (*fa.main_effects, *fa.interactions)}
        xs = [effects[n].factor if n in effects else None for n in names]
        lows = [effects[n].ci_low if n in effects else None for n in names]
        highs = [effects[n].ci_high if n in effects else None for n in names]
        hover = []
        for n in names:
            e = effects.get(n)
            if e is None:
                hover.append(plain(f"{workload}: {n} not estimated"))
                continue
            kind = "main effect" if len(e.factors) == 1 else "interaction"
            value = f"{ratio_ci(e.factor, e.ci_low, e.ci_high)}, p={pvalue(e.p_value)}"
            hover.append(plain_lines(workload, f"{n} ({kind}): {value}"))
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "orientation": "h",  # the categories are on y: group the workloads along it
                "name": plain(workload),
                "x": xs,
                "y": plain_all(names),
                "error_x": asymmetric_error(xs, lows, highs),
                "marker": {"color": color_for(workload, colors), "size": 10},
                "hovertext": hover,
                "hoverinfo": "text",
            }
        )
    # Grouped scatter autoranges like bars (from 0): fit the effects, their intervals and the 1x line.
    ends = [1.0] + [v for t in traces for v in (*t["x"], *_bounds(t)) if isinstance(v, int | float)]
    pad = (max(ends) - min(ends)) * 0.08 or 0.05
    layout = {
        "shapes": [_parity_line("x")],
        # Workloads side by side within each effect's row, not drawn over each other.
        "scattermode": "group",
        "scattergap": 0.4,
        "xaxis": {
            "title": {"text": plain(f"{label} effect (\u00d7, >1 is better)")},
            "range": [min(ends) - pad, max(ends) + pad],
        },
        "yaxis": {"type": "category", "autorange": "reversed", "title": {"text": "Factor / interaction"}},
    }
    return build_figure(traces, title, layout=layout)
