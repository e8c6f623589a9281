"""Liveness and readiness probes."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ablate.backend import __version__
from ablate.backend.db import migrate
from ablate.backend.db.database import Database, unavailable
from ablate.backend.errors import AblateError
from ablate.backend.services.errors import RETRY_AFTER_S

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok", "version": __version__}


def _database_state(database: Database) -> dict[str, Any]:
    try:
        migrate.assert_up_to_date(database.engine)
    except AblateError as exc:
        return {"state": "outdated", "dialect": database.dialect, "detail": str(exc)}
    except Exception as exc:  # any driver error means not ready; say which
        state = "unreachable" if unavailable(exc) else "error"
        return {
            "state": state,
            "dialect": database.dialect,
            "detail": f"database check failed: {type(exc).__name__}",
        }
    return {"state": "ok", "dialect": database.dialect}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """Ready: the database answers, its schema is the one this code expects, and the in-process
    dispatcher of ``ablate serve`` (``null`` when this server runs none) is running, not waiting to
    retry after an error, and its Ray is connected (``dispatcher.ray``: ``lost`` while the dispatcher
    restarts or re-joins it). 503 otherwise, with ``Retry-After`` while the database cannot be reached."""
    database = _database_state(request.app.state.database)
    supervisor = getattr(request.app.state, "dispatcher", None)
    dispatcher = dataclasses.asdict(supervisor.status()) if supervisor is not None else None
    ready = database["state"] == "ok" and (
        dispatcher is None or (dispatcher["state"] == "running" and dispatcher["ray"] == "connected")
    )
    worker = getattr(request.app.state, "webhooks", None)
    body: dict[str, Any] = {
        "status": "ready" if ready else "unavailable",
        "database": database,
        "dispatcher": dispatcher,
        # informative only: a webhook worker retrying does not make the API unready
        "webhooks": dataclasses.asdict(worker.status()) if worker is not None else None,
    }
    if ready:
        return JSONResponse(body)
    if database["state"] != "ok":
        body["detail"] = database["detail"]
    elif dispatcher is not None and dispatcher["ray"] == "lost":
        body["detail"] = f"the dispatcher's Ray is lost ({dispatcher['ray_lost']}); reconnecting"
    elif dispatcher is not None:
        body["detail"] = f"the dispatcher is {dispatcher['state']}: {dispatcher['last_error']}"
    headers = {"Retry-After": str(RETRY_AFTER_S)} if database["state"] == "unreachable" else None
    return JSONResponse(body, status_code=503, headers=headers)
