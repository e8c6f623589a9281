"""The FastAPI application: routes are thin; logic lives in ``ablate.backend.services``."""

from __future__ import annotations

from fastapi import FastAPI

from ablate.backend import __version__, dashboard
from ablate.backend.api import openapi, problems
from ablate.backend.api.lifespan import app_lifespan
from ablate.backend.api.middleware import (
    BodyLimitMiddleware,
    ControlCharacterMiddleware,
    MetricsMiddleware,
    RequestMetrics,
    SecurityHeadersMiddleware,
)
from ablate.backend.api.routes import advice as advice_routes
from ablate.backend.api.routes import (
    catalog,
    health,
    hygiene,
    metrics,
    results,
    runs,
    studies,
    tokens,
    webhooks,
)
from ablate.backend.api.routes import comparison as comparison_routes
from ablate.backend.api.routes import docs as docs_routes
from ablate.backend.api.routes import history as history_routes
from ablate.backend.api.routes import images as images_routes
from ablate.backend.config import Settings, get_settings
from ablate.backend.db.database import Database

API_PREFIX = "/api/v1"


def create_app(
    settings: Settings | None = None, database: Database | None = None, *, run_dispatcher: bool = False
) -> FastAPI:
    settings = settings or get_settings()
    database = database or Database.from_url(settings.resolved_database_url)
    app = FastAPI(
        title="Ablate",
        version=__version__,
        description="Ablation studies of training-image releases: what each optimisation is worth.",
        openapi_url=None,  # served by routes.docs, behind the read setting, as /docs and /redoc are
        docs_url=None,
        lifespan=app_lifespan,  # the webhook worker; the in-process dispatcher when run_dispatcher
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.database = database
    app.state.run_dispatcher = run_dispatcher  # the workers issue starts it in the lifespan
    app.state.metrics_registry = metrics.make_registry(database)

    problems.install(app)
    # Last added is outermost: metrics see every request, including those the body cap refuses.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(ControlCharacterMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=RequestMetrics(app.state.metrics_registry))
    app.add_middleware(SecurityHeadersMiddleware)  # outermost: every answer, refusals included

    app.include_router(health.router)
    app.include_router(docs_routes.router)
    app.mount(docs_routes.ASSETS_URL, docs_routes.assets(), name="docs-assets")
    app.include_router(metrics.router)
    # The catalog's /releases/{ref} leaves /comparison and /report to these (backend/api/paths.py).
    app.include_router(comparison_routes.router, prefix=API_PREFIX)
    app.include_router(history_routes.router, prefix=API_PREFIX)
    app.include_router(images_routes.router, prefix=API_PREFIX)
    for module in (catalog, studies, runs, results, tokens, hygiene, webhooks):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(advice_routes.router, prefix=API_PREFIX)
    # The dashboard: pages after the API routes, its static files, and HTML 404s for non-API paths
    # (installed after problems.install so API paths keep their problem+json answers).
    app.include_router(dashboard.router)
    app.mount(dashboard.STATIC_URL, dashboard.static_app(), name="static")
    dashboard.install_error_pages(app)
    openapi.install(app)
    return app
