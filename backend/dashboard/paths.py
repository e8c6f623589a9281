"""Where the dashboard's templates and static files live, resolved from the package location.

``web/`` is installed as the package ``ablate.web`` (a checkout's folder in an editable install, the
wheel's copy otherwise), so the paths depend neither on the working directory nor on a checkout.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.staticfiles import StaticFiles

import ablate.web

WEB_DIR = Path(ablate.web.__file__).resolve().parent
TEMPLATES_DIR = WEB_DIR / "templates"
STATIC_DIR = WEB_DIR / "static"
STATIC_URL = "/static"
# plotly.js is served from the installed package under its own prefix, never under /static.
PLOTLY_URL = "/vendor/plotly.min.js"
# The script that draws the figures embedded in a page (ablate.backend.charts.html.DRAW_FIGURES_JS).
DRAW_FIGURES_URL = "/vendor/ablate-charts.js"


def static_app() -> StaticFiles:
    """The ASGI app for ``web/static`` (CSS, the live study script)."""
    return StaticFiles(directory=STATIC_DIR)
