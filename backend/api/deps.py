"""What routes share: the database handle of the app."""

from __future__ import annotations

from fastapi import Request

from ablate.backend.db.database import Database


def database(request: Request) -> Database:
    return request.app.state.database
