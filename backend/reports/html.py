"""HTML report: one self-contained file (plotly.js inlined from the installed package) that opens offline.

Charts are the same figures the dashboard shows (``ablate.backend.charts``), embedded with fixed div ids so
the same data gives the same bytes. Tables come from :mod:`ablate.backend.reports.tables`, shared with the
Markdown report.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

import plotly.graph_objects as go
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ablate.backend import charts
from ablate.backend.analysis.stats import Summary
from ablate.backend.charts.ablation import factorial_effects
from ablate.backend.domain.csp import content_security_policy, script_hash
from ablate.backend.reports import tables as t
from ablate.backend.reports.checkpointing import advisor_section
from ablate.backend.reports.markdown import adaptive_lines
from ablate.backend.reports.tables import Chart
from ablate.backend.services.advice import ReleaseAdvice
from ablate.backend.services.comparison import ReleaseComparison
from ablate.backend.services.history import ReleaseHistories

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class ClusterCharts:
    cluster: str
    charts: tuple[Chart, ...]


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _chart(div_id: str, fig: go.Figure) -> Chart:
    title = html.unescape(fig.layout.title.text or div_id)  # the chart's title is plotly plain text
    return Chart(div_id, title, Markup(charts.figure_to_div(fig, div_id)))  # plotly-generated markup, trusted


def _median_only(n: int, median: float, confidence: float) -> Summary:
    return Summary(n, median, None, None, None, None, None, None, None, confidence, False, ())


def _trend_points(
    c: ReleaseComparison, cluster: str, workload: str, metric: str
) -> dict[str, dict[str, Summary]]:
    """variant -> release -> Summary of medians: the lookback releases, then this release.

    The history carries medians only (no raw values), so the trend has no interval bars; this
    keeps the report from loading every earlier release's runs again.
    """
    ladder = c.ladder_map(cluster, metric).get(workload)
    points: dict[str, dict[str, Summary]] = {}
    for d in c.deltas:
        if (d.cluster, d.workload, d.metric) != (cluster, workload, metric):
            continue
        per = [(p.release, _median_only(p.n, p.median, c.method.confidence)) for p in d.history]
        v = ladder.variant(d.variant) if ladder else None
        if v is not None and v.summary.n and v.summary.median is not None:
            per.append((c.release.ref, _median_only(v.summary.n, v.summary.median, c.method.confidence)))
        if per:
            points[d.variant] = dict(per)
    return points


class _Where(TypedDict):
    # What every chart of a cluster shares; typed so that ``**where`` fills only these keywords.
    release: str
    cluster: str


def cluster_charts(c: ReleaseComparison) -> list[ClusterCharts]:
    """Every chart of the report, per cluster, with ids that depend only on positions in the data.

    Built afresh on every call, not memoised: a figure is one validated plotly construction
    (a few ms), so the whole report's charts cost well under the 2 s aim (benchmarks/README.md).
    """
    out = []
    colors = charts.variant_colors(v.name for v in c.variants)
    for ci, cluster in enumerate(c.clusters):
        items: list[Chart] = []
        where: _Where = {"release": c.release.ref, "cluster": cluster.name}
        shown = c.cluster_ladders(cluster.name)
        prim, mem = shown.primary or {}, shown.memory or {}
        p = f"c{ci}"
        if c.primary_metric:
            repeats = c.repeat_map(cluster.name, c.primary_metric)
            fig = charts.ablation_bars(prim, **where, colors=colors, repeats=repeats)
            items.append(_chart(f"{p}-ablation", fig))
            items.append(_chart(f"{p}-heatmap", charts.speedup_heatmap(prim, **where)))
        if c.memory_metric:
            repeats = c.repeat_map(cluster.name, c.memory_metric)
            fig = charts.memory_bars(mem, **where, colors=colors, repeats=repeats)
            items.append(_chart(f"{p}-memory", fig))
            if prim:
                fig = charts.throughput_vs_memory(prim, mem, **where, colors=colors)
                items.append(_chart(f"{p}-tput-mem", fig))
        if shown.effects is not None:
            items.append(_chart(f"{p}-factorial", factorial_effects(shown.effects, **where)))
        for wi, (workload, ladder) in enumerate(prim.items()):
            if shown.waterfalls:
                fig = charts.contribution_waterfall(ladder, **where, workload=workload, colors=colors)
                items.append(_chart(f"{p}-w{wi}-waterfall", fig))
            if c.lookback_releases and c.primary_metric:
                fig = charts.release_trend(
                    _trend_points(c, cluster.name, workload, c.primary_metric),
                    charts.TrendSpec([*c.lookback_releases, c.release.ref], c.primary_metric, ladder.unit),
                    cluster=cluster.name,
                    workload=workload,
                    colors=colors,
                )
                items.append(_chart(f"{p}-w{wi}-trend", fig))
        out.append(ClusterCharts(cluster.name, tuple(items)))
    return out


def history_charts(h: ReleaseHistories | None) -> list[Chart]:
    """One history chart per cell the report shows (see :func:`release_histories` for the bound)."""
    if h is None:
        return []
    return [
        _chart(
            f"h{i}-history",
            charts.history_chart(
                item.history,
                variant=item.key.variant,
                metric=item.key.metric,
                unit=item.unit,
                cluster=item.key.cluster,
                workload=item.key.workload,
            ),
        )
        for i, item in enumerate(h.items)
    ]


@lru_cache(maxsize=1)
def report_script_hashes() -> tuple[str, ...]:
    """The hashes of the report's two inline scripts: plotly.js and the figure drawer.

    Constant for an installed plotly, so the report's own ``<meta>`` policy and the header the
    API sends with it allow exactly these scripts and no other (no ``'unsafe-inline'``).
    """
    return (script_hash(charts.plotly_js_source()), script_hash(charts.DRAW_FIGURES_JS))


def render_html(
    c: ReleaseComparison,
    *,
    generated_at: datetime | None = None,
    advice: ReleaseAdvice | None = None,
    history: ReleaseHistories | None = None,
) -> str:
    template = _environment().get_template("report.html.j2")
    return template.render(
        advisor=advisor_section(advice),
        c=c,
        overview=t.overview(c),
        regressions=t.regression_table(c),
        adaptive_lines=adaptive_lines(c.adaptive),
        not_testable=t.not_testable_table(c) if c.not_testable else None,
        ablation=t.ablation_tables(c),
        factorial=t.factorial_tables(c),
        deltas=t.delta_tables(c),
        manifest=t.manifest_table(c),
        environment=t.environment_table(c),
        method=t.method_table(c),
        cluster_charts=cluster_charts(c),
        history=history,
        history_charts=history_charts(history),
        plotly_js=Markup(charts.plotly_js_source()),  # the installed plotly bundle, trusted
        draw_figures_js=Markup(charts.DRAW_FIGURES_JS),  # our own constant script, trusted
        content_security_policy=content_security_policy(report_script_hashes(), meta=True),
        generated_at=generated_at.isoformat() if generated_at else None,
    )
