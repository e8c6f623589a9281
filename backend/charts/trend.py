"""Release trend: median of a metric per release, one line per variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from ablate.backend.analysis.stats import Summary
from ablate.backend.charts._common import plain, plain_all, plain_lines
from ablate.backend.charts.colors import color_for, variant_colors
from ablate.backend.charts.layout import asymmetric_error, build_figure, chart_title, empty_figure
from ablate.backend.domain.formatting import num_ci
from ablate.backend.domain.metrics import describe_metric


def release_trend(
    points: Mapping[str, Mapping[str, Summary | None]],
    *,
    releases: Sequence[str],
    metric: str,
    unit: str | None = None,
    cluster: str | None = None,
    workload: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> go.Figure:
    """``points`` maps variant -> release tag -> Summary; x follows ``releases`` order exactly.

    Releases missing for a variant leave a gap; tags not in ``releases`` are ignored.
    """
    mdef = describe_metric(metric, unit)
    span = f"{releases[0]} → {releases[-1]}" if len(releases) > 1 else (releases[0] if releases else None)
    title = chart_title(f"{mdef.label} by release", release=span, cluster=cluster, extra=workload or "")
    releases = list(dict.fromkeys(releases))
    has_any = any(
        s is not None and s.n and rel in releases for per in points.values() for rel, s in per.items()
    )
    if not releases or not has_any:
        return empty_figure(title)
    variants = list(points)
    colors = dict(colors) if colors else variant_colors(variants)
    traces = []
    for name in variants:
        per = points[name]
        ys: list[float | None] = []
        lows: list[float | None] = []
        highs: list[float | None] = []
        hover: list[str] = []
        for rel in releases:
            s = per.get(rel)
            live = s if s is not None and s.n > 0 else None
            ys.append(live.median if live is not None else None)
            lows.append(live.ci_low if live is not None else None)
            highs.append(live.ci_high if live is not None else None)
            value = num_ci(ys[-1], lows[-1], highs[-1], unit=mdef.unit)
            hover.append(plain_lines(name, f"{rel}: {value}, n={live.n if live is not None else 0}"))
        if all(y is None for y in ys):
            continue
        traces.append(
            {
                "type": "scatter",
                "name": plain(name),
                "x": plain_all(releases),
                "y": ys,
                "mode": "lines+markers",
                "connectgaps": False,
                "error_y": asymmetric_error(ys, lows, highs),
                "line": {"color": color_for(name, colors), "width": 2},
                "marker": {"color": color_for(name, colors), "size": 8},
                "hovertext": hover,
                "hoverinfo": "text",
            }
        )
    layout = {
        "xaxis": {
            "title": {"text": "Release"},
            "type": "category",
            "categoryorder": "array",
            "categoryarray": plain_all(releases),
        },
        "yaxis": {"title": {"text": plain(mdef.axis_title())}},
    }
    return build_figure(traces, title, layout=layout)
