"""Where the dashboard's templates and static files live, resolved from the package location.

The ``web/`` folder sits beside the ``backend`` package (the repository root, or the source tree of
an editable install), so the paths do not depend on the working directory of the server.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.staticfiles import StaticFiles

import backend

WEB_DIR = Path(backend.__file__).resolve().parents[1] / "web"
TEMPLATES_DIR = WEB_DIR / "templates"
STATIC_DIR = WEB_DIR / "static"
STATIC_URL = "/static"
# plotly.js is served from the installed package under its own prefix, never under /static.
PLOTLY_URL = "/vendor/plotly.min.js"


def static_app() -> StaticFiles:
    """The ASGI app for ``web/static`` (CSS, the live study script)."""
    return StaticFiles(directory=STATIC_DIR)
