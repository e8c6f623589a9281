"""The dashboard: server-rendered pages (Jinja2 templates in ``web/``) served by the API's app.

``router`` holds the page routes and the plotly.js route; ``static_app()`` serves ``web/static``.
Views in ``ablate.backend.dashboard.views`` turn service results into plain view models; templates only
format.
"""

from ablate.backend.dashboard.errors import install_error_pages
from ablate.backend.dashboard.paths import STATIC_URL, static_app
from ablate.backend.dashboard.routes import router

__all__ = ["STATIC_URL", "install_error_pages", "router", "static_app"]
