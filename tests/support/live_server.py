"""The real app on a real port, for tests that talk HTTP (API, dashboard, workers).

``start_live_server(db_url)`` builds the app with ``create_app`` against ``db_url`` (migrated by the
caller, e.g. the ``db_url`` fixture), serves it with uvicorn in a background thread on a free port,
waits until ``/readyz`` answers 200 and returns a :class:`LiveServer`; ``stop()`` shuts it down. A thread
rather than a subprocess keeps start-up in milliseconds and lets tests reach ``server.app`` directly.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from backend.api.app import create_app
from backend.config import Settings
from backend.db.database import Database


@dataclass
class LiveServer:
    url: str
    app: FastAPI
    database: Database
    settings: Settings
    _server: uvicorn.Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    @property
    def api(self) -> str:
        return f"{self.url}/api/v1"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
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
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # the OS picks a free port; holding the socket avoids a race for it
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="live-server")
    thread.start()
    url = f"http://127.0.0.1:{port}"
    live = LiveServer(url=url, app=app, database=database, settings=cfg, _server=server, _thread=thread)
    deadline = time.monotonic() + ready_timeout_s
    last: str = "no answer"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                raise RuntimeError(f"live server for {db_url} exited during start-up")
            try:
                response = client.get(f"{url}/readyz")
                if response.status_code == 200:
                    return live
                last = f"{response.status_code} {response.text[:200]}"
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.01)  # polling the port, not waiting for something to happen
    live.stop()
    raise RuntimeError(f"live server for {db_url} not ready after {ready_timeout_s}s: {last}")
