"""Shared figure layout: explicit template, readable legends, titles, and the "no data" figure.

The template is set explicitly (not read from ``plotly.io.templates.default``) so that a global
setting elsewhere cannot change the JSON of a report.

Figures are built in one validated construction, ``go.Figure(data=[trace dicts], layout=dict)``
(see :func:`build_figure`), rather than by ``add_trace``/``update_layout``/``update_xaxes`` calls:
each of those validates and copies again, and a report builds dozens of figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from ablate.backend.charts._common import plain

TEMPLATE = "plotly_white"
FONT_FAMILY = "Inter, Segoe UI, Helvetica, Arial, sans-serif"
HEIGHT = 480
# The modebar (plotly's toolbar) sits in the top 30 px of the figure, right-aligned, and shows on
# hover: the title starts below it (TITLE_TOP px from the top) so it is never covered, whatever
# the figure's width (half-width charts on /compare run their titles under the toolbar otherwise).
TITLE_TOP = 34
TOP_MARGIN = 84


def chart_title(what: str, *, release: str | None = None, cluster: str | None = None, extra: str = "") -> str:
    """E.g. "Throughput vs Base — training-nv-pytorch:25.12 on gpu-a100 · llama3-8b", as plain text.

    Every part is escaped here (:func:`~ablate.backend.charts._common.plain`): callers pass names raw.
    """
    where = " on ".join(p for p in (release, cluster) if p)
    title = f"{what} — {where}" if where else what
    return plain(f"{title} · {extra}" if extra else title)


def base_layout(title: str, *, height: int = HEIGHT, legend: bool = True) -> dict[str, Any]:
    # Horizontal legend under the plot: long variant names stay readable at 1280 px wide.
    return {
        "title": {
            "text": title,
            "x": 0.0,
            "xanchor": "left",
            "y": 1.0,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": TITLE_TOP},
            "font": {"size": 16},
        },
        "font": {"family": FONT_FAMILY, "size": 12},
        "height": height,
        "margin": {"l": 70, "r": 30, "t": TOP_MARGIN, "b": 110},
        "showlegend": legend,
        "legend": {
            "orientation": "h",
            "yanchor": "top",
            "y": -0.18,
            "xanchor": "left",
            "x": 0.0,
            "font": {"size": 12},
            "title": {"text": ""},
        },
        "hoverlabel": {"namelength": -1},
    }


def set_template(fig: go.Figure) -> go.Figure:
    """Give ``fig`` the report template without validating the template again.

    The registered template is a validated ``go.layout.Template`` already; assigning it validates
    and copies every one of its trace defaults again (about 15 ms a figure, most of a figure's
    cost). plotly assigns its own default template the same way, with validation switched off for
    that one assignment (``BaseFigure._initialize_layout_template``). Should plotly drop the flag,
    the assignment simply validates as usual: slower, same figure.
    """
    layout = fig.layout
    previous = getattr(layout, "_validate", True)
    layout._validate = False
    try:
        layout.template = pio.templates[TEMPLATE]
    finally:
        layout._validate = previous
    return fig


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def build_figure(
    traces: list[dict[str, Any]],
    title: str,
    *,
    layout: Mapping[str, Any] | None = None,
    height: int = HEIGHT,
    legend: bool = True,
) -> go.Figure:
    """The figure in one construction: trace dicts (with ``type``) and the shared layout plus ``layout``.

    Keys of ``layout`` replace those of :func:`base_layout`; None values (e.g. an absent
    ``error_y``) are left out, as plotly leaves out properties set to None.
    """
    full = base_layout(title, height=height, legend=legend)
    full.update(_drop_none(layout or {}))
    fig = go.Figure(data=[_drop_none(t) for t in traces], layout=full, skip_invalid=False)
    return set_template(fig)


def apply_layout(fig: go.Figure, title: str, *, height: int = HEIGHT, legend: bool = True) -> go.Figure:
    """The shared layout on a figure built elsewhere (e.g. with ``make_subplots``)."""
    fig.update_layout(base_layout(title, height=height, legend=legend))
    return set_template(fig)


def empty_figure(title: str, message: str = "no data") -> go.Figure:
    """A figure that says there is nothing to show, instead of raising."""
    note = {
        "text": message,
        "x": 0.5,
        "y": 0.5,
        "xref": "paper",
        "yref": "paper",
        "showarrow": False,
        "font": {"size": 18, "color": "#888888"},
    }
    hidden = {"visible": False}
    return build_figure(
        [], title, layout={"annotations": [note], "xaxis": hidden, "yaxis": hidden}, legend=False
    )


def asymmetric_error(
    center: list[float | None], low: list[float | None], high: list[float | None]
) -> dict[str, object] | None:
    """error_x/error_y dict from CI bounds; None entries draw no bar. None when no CI at all."""
    plus = [None if c is None or h is None else h - c for c, h in zip(center, high, strict=True)]
    minus = [None if c is None or lo is None else c - lo for c, lo in zip(center, low, strict=True)]
    if all(p is None for p in plus) and all(m is None for m in minus):
        return None
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.2}
