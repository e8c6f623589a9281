"""The Jinja2 environment of the dashboard: templates from ``web/templates``, formatting filters.

The filters are the shared formatters of :mod:`ablate.backend.domain.formatting`, so a page says a
number exactly as the exported report and the charts' hover text do.
"""

from __future__ import annotations

from typing import Any

import plotly
from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import HTMLResponse

from ablate.backend import __version__
from ablate.backend.dashboard.paths import DRAW_FIGURES_URL, PLOTLY_URL, STATIC_URL, TEMPLATES_DIR
from ablate.backend.domain import formatting as fmt

NAV = (
    ("home", "Home", "/"),
    ("releases", "Releases", "/releases"),
    ("compare", "Compare", "/compare"),
    ("studies", "Studies", "/studies"),
    ("clusters", "Clusters", "/clusters"),
)

# Filters: ``{{ x | num }}``, ``{{ r.speedup | ratio_ci(r.speedup_low, r.speedup_high) }}``...
FILTERS = {
    "num": fmt.num,
    "quantity": fmt.quantity,
    "ratio": fmt.ratio,
    "ratio_ci": fmt.ratio_ci,
    "pct": fmt.pct,
    "pct_ci": fmt.pct_ci,
    "num_ci": fmt.num_ci,
    "interval": fmt.interval,
    "pvalue": fmt.pvalue,
    "qvalue": fmt.qvalue,
    "when": fmt.when,
    "duration": fmt.duration,
}

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.filters.update(FILTERS)
templates.env.globals.update(
    nav=NAV,
    version=__version__,
    static_url=STATIC_URL,
    # The plotly version in the URL lets the script be cached "forever" and still change on upgrade.
    plotly_src=f"{PLOTLY_URL}?v={plotly.__version__}",
    draw_figures_src=DRAW_FIGURES_URL,
)
templates.env.trim_blocks = True
templates.env.lstrip_blocks = True


def render(
    request: Request, name: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> HTMLResponse:
    """Render ``name`` with ``context``; every page gets ``request`` and its nav section."""
    return templates.TemplateResponse(request, name, dict(context or {}), status_code=status_code)
