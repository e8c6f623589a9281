"""The individual repeats of grouped bar charts, drawn as jittered points over their bars.

A bar is a summary (a speed-up of geometric means, a median); the points show the runs behind it,
one per run, with the run id in the hover. They sit on a second, hidden x axis that overlays the
bars' category axis with the same range, so a point's x is a number: the centre of its bar (plotly's
grouped-bar geometry, :func:`bar_center`) plus a jitter drawn from a generator seeded by the workload
and variant, so a chart is byte-identical from one build to the next and adding a workload moves no
other point.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ablate.backend.charts._common import plain

# (run id, the run's value of the chart's metric)
RunValue = tuple[int, float]
# workload -> variant -> the runs behind that bar
Repeats = Mapping[str, Mapping[str, Sequence[RunValue]]]

POINTS_AXIS = "x2"
# The grouped bar charts' gaps (between workloads, between the bars of one workload).
BARGAP, BARGROUPGAP = 0.2, 0.05
# Points spread over this fraction of their bar's width (each side of the centre: half of it).
JITTER_SPAN = 0.6


def bar_center(category: int, slot: int, n_slots: int, *, bargap: float, bargroupgap: float) -> float:
    """Centre of bar ``slot`` of ``n_slots`` at category index ``category`` in plotly's group mode.

    plotly.js (``setGroupPositionsInGroupMode``): the group takes ``1 - bargap`` of the category
    width, each trace an equal share of it, and the bar ``1 - bargroupgap`` of its share, centred.
    """
    group = 1.0 - bargap
    share = group / n_slots
    return category - group / 2 + share * (slot + 0.5)


def bar_width(n_slots: int, *, bargap: float, bargroupgap: float) -> float:
    return (1.0 - bargap) / n_slots * (1.0 - bargroupgap)


def jitter(workload: str, variant: str, n: int, width: float) -> np.ndarray:
    """``n`` offsets in ``[-width/2, width/2]``, the same for the same workload and variant."""
    seed = zlib.crc32(f"{workload}\x00{variant}".encode())
    return np.random.default_rng(seed).uniform(-width / 2, width / 2, n)


@dataclass(frozen=True)
class PointStyle:
    """Where and how :func:`point_traces` draws a run's point.

    ``value_of(workload, value)`` is where a run's value is drawn (e.g. its speed-up over the
    baseline; None leaves the run out), ``hover_of(workload, variant, run_id, value, y)`` its hover,
    ``color_of(variant)`` its colour; ``bargap`` and ``bargroupgap`` are the bar chart's gaps.
    """

    value_of: Callable[[str, float], float | None]
    hover_of: Callable[[str, str, int, float, float], str]
    color_of: Callable[[str], str]
    bargap: float = BARGAP
    bargroupgap: float = BARGROUPGAP


def point_traces(
    repeats: Repeats | None,
    workloads: Sequence[str],
    variants: Sequence[str],
    style: PointStyle,
) -> list[dict[str, Any]]:
    """One scatter trace per variant with runs: a point per run over its bar, drawn as ``style`` says.

    Each trace shares the variant's legend group, so the legend shows and hides bar and points
    together.
    """
    if not repeats:
        return []
    gaps = {"bargap": style.bargap, "bargroupgap": style.bargroupgap}
    width = bar_width(len(variants), **gaps) * JITTER_SPAN
    traces = []
    for slot, name in enumerate(variants):
        xs: list[float] = []
        ys: list[float] = []
        hover: list[str] = []
        ids: list[int] = []
        for category, workload in enumerate(workloads):
            runs = sorted((repeats.get(workload) or {}).get(name) or (), key=lambda r: r[0])
            offsets = jitter(workload, name, len(runs), width)
            center = bar_center(category, slot, len(variants), **gaps)
            for (run_id, value), offset in zip(runs, offsets, strict=True):
                y = style.value_of(workload, value)
                if y is None:
                    continue
                xs.append(round(center + float(offset), 6))
                ys.append(y)
                hover.append(style.hover_of(workload, name, run_id, value, y))
                ids.append(run_id)
        if not xs:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": plain(name),
                "legendgroup": plain(name),
                "showlegend": False,
                "xaxis": POINTS_AXIS,
                "x": xs,
                "y": ys,
                "customdata": ids,  # the run ids, for a click-through
                "marker": {
                    "color": style.color_of(name),
                    "size": 7,
                    "opacity": 0.9,
                    "line": {"color": "#ffffff", "width": 1},
                },
                "hovertext": hover,
                "hoverinfo": "text",
                "meta": "repeats",
            }
        )
    return traces


def pin_points_axes(layout: dict[str, Any], n_categories: int) -> dict[str, Any]:
    """``layout`` with the category axis and the points' hidden numeric axis pinned to one range.

    Both are fixed horizontally: the two axes cannot be linked for zooming (plotly matches only axes
    of one type), and a zoomed category axis would leave the points behind.
    """
    span = [-0.5, n_categories - 0.5]
    return {
        **layout,
        "xaxis": {**layout.get("xaxis", {}), "range": span, "fixedrange": True},
        "xaxis2": {"overlaying": "x", "range": span, "visible": False, "fixedrange": True},
    }
