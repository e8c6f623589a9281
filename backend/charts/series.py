"""Per-step series of one run (step time, loss), one subplot row per metric.

Warm-up steps (the first ``warmup_steps`` steps, which a runner does not measure: a torch.compile
run's first step takes minutes) are a trace of their own, and the step-time axis is scaled to the
measured steps: a warm-up step beyond it is drawn at the axis top as an up-pointing marker labelled
with its value, instead of flattening the measured steps into a line at the bottom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ablate.backend.charts._common import plain
from ablate.backend.charts.layout import apply_layout, chart_title, empty_figure
from ablate.backend.domain.formatting import D3_NUM, quantity
from ablate.backend.domain.metrics import describe_metric

MAX_POINTS = 100_000
# Above this many points per trace, WebGL keeps the page responsive.
WEBGL_THRESHOLD = 20_000
SERIES_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
WARMUP_COLOR = "#ff7f0e"
# Metrics whose axis is scaled to the measured steps (a loss axis keeps the whole curve).
MEASURED_SCALE = frozenset({"step_time_s"})


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
    warmup_steps: int | None = None,
) -> go.Figure:
    """``series`` maps metric -> (steps, values), as runners record them; absent metrics are skipped.

    ``warmup_steps``: steps numbered up to it are warm-up (see the module docstring); None or 0:
    every step is measured.

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
        warm = x <= warmup_steps if warmup_steps else np.zeros(x.shape, dtype=bool)
        mx, my = x[~warm], y[~warm]
        trace_cls = go.Scattergl if mx.size > WEBGL_THRESHOLD else go.Scatter
        fig.add_trace(
            trace_cls(
                name=label,
                x=mx,
                y=my,
                mode="lines",
                line={"color": SERIES_COLORS[(i - 1) % len(SERIES_COLORS)], "width": 1.5},
                hovertemplate=f"step %{{x:.0f}}<br>{label}: %{{y:{D3_NUM}}} {unit}<extra></extra>",
            ),
            row=i,
            col=1,
        )
        top = _measured_top(my) if m in MEASURED_SCALE else None
        if warm.any():
            fig.add_trace(_warmup_trace(label, unit, x[warm], y[warm], top), row=i, col=1)
        if top is not None:
            fig.update_yaxes(range=[_measured_bottom(my, top), top], row=i, col=1)
        fig.update_yaxes(title_text=plain(mdef.axis_title()), row=i, col=1)
    fig.update_xaxes(title_text="Step", row=len(present), col=1)
    return apply_layout(fig, title, height=max(360, 260 * len(present)))


def _measured_top(values: np.ndarray) -> float | None:
    """Top of an axis scaled to the measured ``values`` (a tenth of their spread above), None if none."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    return hi + ((hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0)


def _measured_bottom(values: np.ndarray, top: float) -> float:
    finite = values[np.isfinite(values)]
    lo, hi = float(finite.min()), float(finite.max())
    # Non-negative series (times) keep a floor of 0 instead of a pad below it.
    return max(0.0, lo - (top - hi)) if lo >= 0 else lo - (top - hi)


def _warmup_trace(label: str, unit: str, x: np.ndarray, y: np.ndarray, top: float | None) -> go.Scatter:
    """The warm-up steps as markers; those above ``top`` drawn at it, pointing up, with their value."""
    over = np.isfinite(y) & (y > top) if top is not None else np.zeros(y.shape, dtype=bool)
    shown = np.where(over, top if top is not None else 0.0, y)
    slowest = int(np.argmax(np.where(over, y, -np.inf))) if over.any() else -1
    return go.Scatter(
        name=f"{label} \u00b7 warm-up (not measured)",
        x=x,
        y=shown.astype(np.float32),
        mode="markers+text",
        marker={
            "color": WARMUP_COLOR,
            "size": 9,
            "symbol": ["triangle-up" if o else "diamond" for o in over],
        },
        # Only the slowest is labelled (labels of neighbouring steps overlap); the hover has every one.
        text=[f"{quantity(float(v), unit, 3)} \u2191" if i == slowest else "" for i, v in enumerate(y)],
        textposition="bottom right",
        textfont={"color": WARMUP_COLOR, "size": 11},
        cliponaxis=False,
        hovertext=[
            f"warm-up step {int(s) if float(s).is_integer() else s}: {quantity(float(v), unit, 4)}"
            for s, v in zip(x, y, strict=True)
        ],
        hoverinfo="text",
    )
