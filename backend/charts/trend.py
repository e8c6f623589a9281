"""Release trend: median of a metric per release, one line per variant, with each release's verdict
against the one before it marked (the history chart of the dashboard and the report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import plotly.graph_objects as go

from ablate.backend.analysis.history import History
from ablate.backend.charts._common import plain, plain_all, plain_lines
from ablate.backend.charts.colors import color_for, variant_colors
from ablate.backend.charts.layout import asymmetric_error, build_figure, chart_title, empty_figure
from ablate.backend.domain.formatting import num_ci
from ablate.backend.domain.metrics import describe_metric


class Point(Protocol):
    """What a point of the trend reads: a :class:`~ablate.backend.analysis.stats.Summary` or a
    :class:`~ablate.backend.analysis.history.HistoryEntry`."""

    @property
    def n(self) -> int: ...
    @property
    def median(self) -> float | None: ...
    @property
    def ci_low(self) -> float | None: ...
    @property
    def ci_high(self) -> float | None: ...


# Verdict -> (legend label, marker symbol, color): told apart by shape as well as color.
VERDICT_MARKERS: dict[str, tuple[str, str, str]] = {
    "regressed": ("regression", "triangle-down", "#d62728"),
    "improved": ("improvement", "triangle-up", "#2ca02c"),
    "suspect": ("suspect (past the threshold, p < alpha, not confirmed by q)", "diamond-open", "#ff7f0e"),
    "not testable": ("not testable (< 2 repeats a side)", "x-thin-open", "#7f7f7f"),
}


@dataclass(frozen=True)
class TrendSpec:
    """What a release trend plots: ``releases`` along x in this order, ``metric`` (in ``unit``,
    default its registered one) up the y axis."""

    releases: Sequence[str]
    metric: str
    unit: str | None = None


def release_trend(
    points: Mapping[str, Mapping[str, Point | None]],
    spec: TrendSpec,
    *,
    cluster: str | None = None,
    workload: str | None = None,
    colors: Mapping[str, str] | None = None,
    verdicts: Mapping[str, Mapping[str, str | None]] | None = None,
) -> go.Figure:
    """``points`` maps variant -> release tag -> Summary; x follows ``spec.releases`` order exactly.

    Releases missing for a variant leave a gap; tags not in the spec's releases are ignored.
    ``verdicts`` maps variant -> release -> its verdict against the previous release: regressions,
    improvements, suspects and untestable releases get a marker (one legend entry each); unchanged
    and uncompared releases none.
    """
    releases = spec.releases
    mdef = describe_metric(spec.metric, spec.unit)
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
    traces += _verdict_traces(points, releases, verdicts or {}, mdef.unit)
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


def _verdict_traces(
    points: Mapping[str, Mapping[str, Point | None]],
    releases: Sequence[str],
    verdicts: Mapping[str, Mapping[str, str | None]],
    unit: str,
) -> list[dict]:
    """One marker trace per verdict kind that occurs, drawn over the medians."""
    traces = []
    for verdict, (label, symbol, color) in VERDICT_MARKERS.items():
        xs: list[str] = []
        ys: list[float] = []
        hover: list[str] = []
        for name, per in verdicts.items():
            for rel in releases:
                s = points.get(name, {}).get(rel)
                if per.get(rel) != verdict or s is None or s.median is None:
                    continue
                xs.append(plain(rel))  # the category axis holds the escaped names
                ys.append(s.median)
                hover.append(
                    plain_lines(name, f"{rel}: {label}", f"median {num_ci(s.median, None, None, unit=unit)}")
                )
        if xs:
            traces.append(
                {
                    "type": "scatter",
                    "name": label,
                    "x": xs,
                    "y": ys,
                    "mode": "markers",
                    "marker": {
                        "symbol": symbol,
                        "size": 16,
                        "color": color,
                        "line": {"width": 2, "color": color},
                    },
                    "hovertext": hover,
                    "hoverinfo": "text",
                    "meta": {"verdict": verdict},
                }
            )
    return traces


def history_chart(
    history: History,
    *,
    variant: str,
    metric: str,
    unit: str | None = None,
    cluster: str | None = None,
    workload: str | None = None,
) -> go.Figure:
    """One cell and metric across the family's releases: median with its interval per release,
    each release's verdict against the previous one marked."""
    releases = [e.release for e in history.entries]
    return release_trend(
        {variant: {e.release: e for e in history.entries}},
        TrendSpec(releases, metric, unit),
        cluster=cluster,
        workload=f"{workload} · {variant}" if workload else variant,
        verdicts={variant: {e.release: e.verdict for e in history.entries}},
    )
