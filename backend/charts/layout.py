"""Shared figure layout: explicit template, readable legends, titles, and the "no data" figure.

The template is set explicitly (not read from ``plotly.io.templates.default``) so that a global
setting elsewhere cannot change the JSON of a report.
"""

from __future__ import annotations

import plotly.graph_objects as go

TEMPLATE = "plotly_white"
FONT_FAMILY = "Inter, Segoe UI, Helvetica, Arial, sans-serif"
HEIGHT = 480


def chart_title(what: str, *, release: str | None = None, cluster: str | None = None, extra: str = "") -> str:
    """E.g. "Throughput vs Base — training-nv-pytorch:25.12 on gpu-a100 · llama3-8b"."""
    where = " on ".join(p for p in (release, cluster) if p)
    title = f"{what} — {where}" if where else what
    return f"{title} · {extra}" if extra else title


def apply_layout(fig: go.Figure, title: str, *, height: int = HEIGHT, legend: bool = True) -> go.Figure:
    # Horizontal legend under the plot: long variant names stay readable at 1280 px wide.
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 16}},
        font={"family": FONT_FAMILY, "size": 12},
        height=height,
        margin={"l": 70, "r": 30, "t": 60, "b": 110},
        showlegend=legend,
        legend={
            "orientation": "h",
            "yanchor": "top",
            "y": -0.18,
            "xanchor": "left",
            "x": 0.0,
            "font": {"size": 12},
            "title": {"text": ""},
        },
        hoverlabel={"namelength": -1},
    )
    return fig


def empty_figure(title: str, message: str = "no data") -> go.Figure:
    """A figure that says there is nothing to show, instead of raising."""
    fig = go.Figure()
    fig.add_annotation(
        text=message,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font={"size": 18, "color": "#888888"},
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return apply_layout(fig, title, legend=False)


def asymmetric_error(
    center: list[float | None], low: list[float | None], high: list[float | None]
) -> dict[str, object] | None:
    """error_x/error_y dict from CI bounds; None entries draw no bar. None when no CI at all."""
    plus = [None if c is None or h is None else h - c for c, h in zip(center, high, strict=True)]
    minus = [None if c is None or lo is None else c - lo for c, lo in zip(center, low, strict=True)]
    if all(p is None for p in plus) and all(m is None for m in minus):
        return None
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.2}
