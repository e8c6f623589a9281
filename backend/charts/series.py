"""Per-step series of one run (step time, loss), one subplot row per metric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ablate.backend.charts._common import plain
from ablate.backend.charts.layout import apply_layout, chart_title, empty_figure
from ablate.backend.domain.formatting import D3_NUM
from ablate.backend.domain.metrics import describe_metric

MAX_POINTS = 100_000
# Above this many points per trace, WebGL keeps the page responsive.
WEBGL_THRESHOLD = 20_000
SERIES_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _compact_steps(x: np.ndarray) -> np.ndarray:
    # Integral step numbers fit int32 exactly; anything else keeps float64.
    if np.all(np.isfinite(x)) and np.all(x == np.round(x)) and np.abs(x).max() < 2**31:
        return x.astype(np.int32)
    return x


def run_series(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    metrics: Sequence[str] = ("step_time_s", "loss"),
    run_label: str | None = None,
    release: str | None = None,
    cluster: str | None = None,
) -> go.Figure:
    """``series`` maps metric -> (steps, values), as runners record them; absent metrics are skipped.

    Arrays are sent as int32 steps and float32 values (7 significant digits is plenty on screen),
    which plotly encodes as base64 typed arrays: 100k points cost about 1 MB of JSON. Callers
    should still downsample for display. NaN values leave gaps.
    """
    title = chart_title("Per-step series", release=release, cluster=cluster, extra=run_label or "")
    present: list[tuple[str, np.ndarray, np.ndarray]] = []
    for m in metrics:
        if m not in series:
            continue
        steps, values = series[m]
        x = np.asarray(steps, dtype=float)
        y = np.asarray(values, dtype=float)
        if x.shape != y.shape or x.ndim != 1:
            raise ValueError(f"series {m!r}: steps and values must be 1-D and of equal length")
        if x.size > MAX_POINTS:
            raise ValueError(f"series {m!r} has {x.size} points; downsample to at most {MAX_POINTS}")
        if x.size:
            present.append((m, x, y))
    if not present:
        return empty_figure(title)
    present = [(m, _compact_steps(x), y.astype(np.float32)) for m, x, y in present]
    fig = make_subplots(rows=len(present), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for i, (m, x, y) in enumerate(present, start=1):
        mdef = describe_metric(m)
        label, unit = plain(mdef.label), plain(mdef.unit)
        trace_cls = go.Scattergl if x.size > WEBGL_THRESHOLD else go.Scatter
        fig.add_trace(
            trace_cls(
                name=label,
                x=x,
                y=y,
                mode="lines",
                line={"color": SERIES_COLORS[(i - 1) % len(SERIES_COLORS)], "width": 1.5},
                hovertemplate=f"step %{{x:.0f}}<br>{label}: %{{y:{D3_NUM}}} {unit}<extra></extra>",
            ),
            row=i,
            col=1,
        )
        fig.update_yaxes(title_text=plain(mdef.axis_title()), row=i, col=1)
    fig.update_xaxes(title_text="Step", row=len(present), col=1)
    return apply_layout(fig, title, height=max(360, 260 * len(present)))
