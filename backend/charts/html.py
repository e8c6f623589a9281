"""HTML embedding of figures: a fixed div id, and plotly.js from the installed package (no CDN)."""

from __future__ import annotations

import re
from functools import lru_cache

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

_DIV_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


def figure_to_div(fig: go.Figure, div_id: str) -> str:
    """The figure as an HTML fragment with a caller-chosen id, so exports are byte-identical.

    plotly.js must be loaded separately, once per page (see :func:`plotly_js_source`).
    """
    if not _DIV_ID.match(div_id):
        raise ValueError(f"div_id must match {_DIV_ID.pattern}, got {div_id!r}")
    return pio.to_html(
        fig,
        config=PLOTLY_CONFIG,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        default_width="100%",
        default_height=f"{fig.layout.height or 480}px",
    )


@lru_cache(maxsize=1)
def plotly_js_source() -> str:
    """The minified plotly.js bundled with the installed plotly package."""
    return plotly.offline.get_plotlyjs()
