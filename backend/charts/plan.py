"""Which charts a release comparison has on a cluster: decided here once, for the release page (which
draws some kinds) and the HTML report (which draws them all), so the two cannot drift apart.

A planned chart carries its figure as a function: a caller builds only the kinds it shows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TypedDict

import plotly.graph_objects as go

from ablate.backend.analysis.stats import Summary
from ablate.backend.charts.ablation import (
    ablation_bars,
    contribution_waterfall,
    factorial_effects,
    speedup_heatmap,
)
from ablate.backend.charts.memory import memory_bars, throughput_vs_memory
from ablate.backend.charts.trend import TrendSpec, release_trend
from ablate.backend.services.comparison import ReleaseComparison

# Per cluster: the ladders' bars, the speedup heatmap, memory bars, throughput against memory and the
# factorial effects; per workload: the contribution waterfall and the trend over the lookback releases.
KINDS = ("ablation", "heatmap", "memory", "tput-mem", "factorial", "waterfall", "trend")


@dataclass(frozen=True)
class PlannedChart:
    kind: str  # one of KINDS
    draw: Callable[[], go.Figure]
    workload: str | None = None  # the per-workload kinds' workload
    workload_index: int = 0  # its position among the cluster's shown workloads


def cluster_chart_plan(
    c: ReleaseComparison,
    cluster: str,
    colors: Mapping[str, str],
    workloads: Collection[str] | None = None,
) -> list[PlannedChart]:
    """The charts of ``cluster`` (only ``workloads``' ladders where given), in the report's order."""
    shown = c.cluster_ladders(cluster, workloads)
    prim, mem = shown.primary or {}, shown.memory or {}
    where: _Where = {"release": c.release.ref, "cluster": cluster}
    out: list[PlannedChart] = []
    if prim and c.primary_metric:
        repeats = c.repeat_map(cluster, c.primary_metric)
        out.append(
            PlannedChart("ablation", partial(ablation_bars, prim, **where, colors=colors, repeats=repeats))
        )
        out.append(PlannedChart("heatmap", partial(speedup_heatmap, prim, **where)))
    if mem and c.memory_metric:
        repeats = c.repeat_map(cluster, c.memory_metric)
        out.append(PlannedChart("memory", partial(memory_bars, mem, **where, colors=colors, repeats=repeats)))
        if prim:
            out.append(
                PlannedChart("tput-mem", partial(throughput_vs_memory, prim, mem, **where, colors=colors))
            )
    if shown.effects:
        out.append(PlannedChart("factorial", partial(factorial_effects, shown.effects, **where)))
    for wi, (workload, ladder) in enumerate(prim.items()):
        if shown.waterfalls:
            draw = partial(contribution_waterfall, ladder, **where, workload=workload, colors=colors)
            out.append(PlannedChart("waterfall", draw, workload, wi))
        if c.lookback_releases and c.primary_metric:
            draw = partial(_trend, c, cluster, workload, c.primary_metric, ladder.unit, colors)
            out.append(PlannedChart("trend", draw, workload, wi))
    return out


class _Where(TypedDict):
    # What every chart of a cluster shares; typed so that ``**where`` fills only these keywords.
    release: str
    cluster: str


def _trend(
    c: ReleaseComparison, cluster: str, workload: str, metric: str, unit: str, colors: Mapping[str, str]
) -> go.Figure:
    spec = TrendSpec([*c.lookback_releases, c.release.ref], metric, unit)
    points = trend_points(c, cluster, workload, metric)
    return release_trend(points, spec, cluster=cluster, workload=workload, colors=colors)


def _median_only(n: int, median: float, confidence: float) -> Summary:
    return Summary(n, median, None, None, None, None, None, None, None, confidence, False, ())


def trend_points(
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
