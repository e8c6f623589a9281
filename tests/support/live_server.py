"""The real app on a real port, for tests that talk HTTP (API, dashboard, workers).

``start_live_server(db_url)`` builds the app with ``create_app`` against ``db_url`` (migrated by the
caller, e.g. the ``db_url`` fixture), serves it with uvicorn in a background thread on a free port,
waits until ``/readyz`` answers 200 and returns a :class:`LiveServer`; ``stop()`` shuts it down. A thread
rather than a subprocess keeps start-up in milliseconds and lets tests reach ``server.app`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from ablate.backend.api.app import create_app
from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.server import BackgroundServer, bind_socket, start_background_server


@dataclass
class LiveServer:
    url: str
    app: FastAPI
    database: Database
    settings: Settings
    _background: BackgroundServer = field(repr=False)

    @property
    def api(self) -> str:
        return f"{self.url}/api/v1"

    def stop(self) -> None:
        self._background.stop(timeout_s=15)
        self.database.dispose()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_live_server(
    db_url: str,
    *,
    settings: dict[str, Any] | None = None,
    run_dispatcher: bool = False,
    ready_timeout_s: float = 20.0,
) -> LiveServer:
    """Serve the app for ``db_url`` with ``settings`` overrides (Settings field names) until ``stop()``."""
    cfg = Settings(**{"database_url": db_url, **(settings or {})})
    database = Database.from_url(db_url)
    app = create_app(cfg, database, run_dispatcher=run_dispatcher)
    # port 0: the OS picks a free port; holding the socket avoids a race for it
    background = start_background_server(app, bind_socket("127.0.0.1", 0), ready_timeout_s=ready_timeout_s)
    return LiveServer(url=background.url, app=app, database=database, settings=cfg, _background=background)
