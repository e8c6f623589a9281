"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ablate.backend import __version__
from ablate.backend.db import migrate
from ablate.backend.errors import AblateError

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok", "version": __version__}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """The database answers and its schema is the one this code expects."""
    database = request.app.state.database
    try:
        migrate.assert_up_to_date(database.engine)
    except AblateError as exc:
        return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
    except Exception as exc:  # any driver error means not ready; say which
        return JSONResponse(
            {"status": "unavailable", "detail": f"database check failed: {type(exc).__name__}"},
            status_code=503,
        )
    return JSONResponse({"status": "ready", "database": database.dialect})
