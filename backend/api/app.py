"""The FastAPI application: routes are thin; logic lives in ``backend.services``."""

from __future__ import annotations

from fastapi import FastAPI

from backend import __version__
from backend.api.routes import health
from backend.config import Settings, get_settings
from backend.db.database import Database


def create_app(
    settings: Settings | None = None, database: Database | None = None, *, run_dispatcher: bool = False
) -> FastAPI:
    settings = settings or get_settings()
    database = database or Database.from_url(settings.resolved_database_url)
    app = FastAPI(
        title="Ablate",
        version=__version__,
        description="Ablation studies of training-image releases: what each optimisation is worth.",
        openapi_url="/api/v1/openapi.json",
        docs_url="/docs",
    )
    app.state.settings = settings
    app.state.database = database
    app.state.run_dispatcher = run_dispatcher  # the workers issue starts it in the lifespan
    app.include_router(health.router)
    return app
