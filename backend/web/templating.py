"""The Jinja2 environment of the dashboard: templates from ``web/templates``, formatting filters."""

from __future__ import annotations

from typing import Any

import plotly
from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import HTMLResponse

from ablate.backend import __version__
from ablate.backend.web.format import FILTERS
from ablate.backend.web.paths import PLOTLY_URL, STATIC_URL, TEMPLATES_DIR

NAV = (
    ("home", "Home", "/"),
    ("releases", "Releases", "/releases"),
    ("compare", "Compare", "/compare"),
    ("studies", "Studies", "/studies"),
    ("clusters", "Clusters", "/clusters"),
)

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
templates.env.filters.update(FILTERS)
templates.env.globals.update(
    nav=NAV,
    version=__version__,
    static_url=STATIC_URL,
    # The plotly version in the URL lets the script be cached "forever" and still change on upgrade.
    plotly_src=f"{PLOTLY_URL}?v={plotly.__version__}",
)
templates.env.trim_blocks = True
templates.env.lstrip_blocks = True


def render(
    request: Request, name: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> HTMLResponse:
    """Render ``name`` with ``context``; every page gets ``request`` and its nav section."""
    return templates.TemplateResponse(request, name, dict(context or {}), status_code=status_code)
