"""HTML report: one self-contained file (plotly.js inlined from the installed package) that opens offline.

Charts are the same figures the dashboard shows (``backend.charts``), embedded with fixed div ids so
the same data gives the same bytes. Tables come from :mod:`backend.reports.tables`, shared with the
Markdown report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import plotly.graph_objects as go
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from backend import charts
from backend.analysis.ablation import LadderAnalysis
from backend.analysis.stats import Summary
from backend.reports import tables as t
from backend.services.comparison import ReleaseComparison

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Chart:
    div_id: str
    title: str
    html: Markup


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
    title = fig.layout.title.text or div_id
    return Chart(div_id, title, Markup(charts.figure_to_div(fig, div_id)))  # plotly-generated markup, trusted


def _median_only(n: int, median: float, confidence: float) -> Summary:
    return Summary(n, median, None, None, None, None, None, None, None, confidence, False, ())


def _trend_points(c: ReleaseComparison, cluster: str, workload: str, metric: str) -> Points:
    """variant -> release -> Summary of medians: the lookback releases, then this release.

    The history carries medians only (no raw values), so the trend has no interval bars; this
    keeps the report from bootstrapping every earlier release again.
    """
    ladder = c.ladder_map(cluster, metric).get(workload)
    points = []
    for d in c.deltas:
        if (d.cluster, d.workload, d.metric) != (cluster, workload, metric):
            continue
        per = [(p.release, _median_only(p.n, p.median, c.method.confidence)) for p in d.history]
        v = ladder.variant(d.variant) if ladder else None
        if v is not None and v.summary.n and v.summary.median is not None:
            per.append((c.release.ref, _median_only(v.summary.n, v.summary.median, c.method.confidence)))
        if per:
            points.append((d.variant, tuple(per)))
    return tuple(points)


# Chart HTML is memoised on its (hashable, frozen) inputs: building a plotly figure costs ~0.1 s,
# and a second export or dashboard view of the same data then reuses the div text.
Ladders = tuple[tuple[str, LadderAnalysis], ...]
Colors = tuple[tuple[str, str], ...]
Points = tuple[tuple[str, tuple[tuple[str, Summary], ...]], ...]


@lru_cache(maxsize=2048)
def _cached(div_id: str, kind: str, a: Ladders, b: Ladders, extra: tuple, colors: Colors) -> Chart:
    rel, cl = extra[0], extra[1]
    col = dict(colors)
    if kind == "ablation":
        fig = charts.ablation_bars(dict(a), release=rel, cluster=cl, colors=col)
    elif kind == "heatmap":
        fig = charts.speedup_heatmap(dict(a), release=rel, cluster=cl)
    elif kind == "memory":
        fig = charts.memory_bars(dict(a), release=rel, cluster=cl, colors=col)
    elif kind == "tput-mem":
        fig = charts.throughput_vs_memory(dict(a), dict(b), release=rel, cluster=cl, colors=col)
    elif kind == "waterfall":
        fig = charts.contribution_waterfall(a[0][1], release=rel, cluster=cl, workload=a[0][0], colors=col)
    else:  # trend
        _rel, _cl, workload, metric, unit, refs, points = extra
        fig = charts.release_trend(
            {v: dict(per) for v, per in points},
            releases=list(refs),
            metric=metric,
            unit=unit,
            cluster=cl,
            workload=workload,
            colors=col,
        )
    return _chart(div_id, fig)


def clear_cache() -> None:
    _cached.cache_clear()


def cluster_charts(c: ReleaseComparison) -> list[ClusterCharts]:
    """Every chart of the report, per cluster, with ids that depend only on positions in the data."""
    out = []
    colors = tuple(charts.variant_colors(v.name for v in c.variants).items())
    for ci, cluster in enumerate(c.clusters):
        items: list[Chart] = []
        rel, cl = c.release.ref, cluster.name
        prim = tuple(c.ladder_map(cl, c.primary_metric).items()) if c.primary_metric else ()
        mem = tuple(c.ladder_map(cl, c.memory_metric).items()) if c.memory_metric else ()
        p = f"c{ci}"
        if c.primary_metric:
            items.append(_cached(f"{p}-ablation", "ablation", prim, (), (rel, cl), colors))
            items.append(_cached(f"{p}-heatmap", "heatmap", prim, (), (rel, cl), colors))
        if c.memory_metric:
            items.append(_cached(f"{p}-memory", "memory", mem, (), (rel, cl), colors))
            if prim:
                items.append(_cached(f"{p}-tput-mem", "tput-mem", prim, mem, (rel, cl), colors))
        for wi, (workload, ladder) in enumerate(prim):
            items.append(
                _cached(f"{p}-w{wi}-waterfall", "waterfall", ((workload, ladder),), (), (rel, cl), colors)
            )
            if c.lookback_releases and c.primary_metric:
                refs = (*c.lookback_releases, rel)
                points = _trend_points(c, cl, workload, c.primary_metric)
                extra = (rel, cl, workload, c.primary_metric, ladder.unit, refs, points)
                items.append(_cached(f"{p}-w{wi}-trend", "trend", (), (), extra, colors))
        out.append(ClusterCharts(cl, tuple(items)))
    return out


def render_html(c: ReleaseComparison, *, generated_at: datetime | None = None) -> str:
    template = _environment().get_template("report.html.j2")
    return template.render(
        c=c,
        overview=t.overview(c),
        regressions=t.regression_table(c),
        ablation=t.ablation_tables(c),
        deltas=t.delta_tables(c),
        manifest=t.manifest_table(c),
        environment=t.environment_table(c),
        method=t.method_table(c),
        cluster_charts=cluster_charts(c),
        plotly_js=Markup(charts.plotly_js_source()),  # the installed plotly bundle, trusted
        generated_at=generated_at.isoformat() if generated_at else None,
    )
