"""Serving the app from a background thread: the demo's embedded service (and the tests' live server)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import httpx
import uvicorn
from fastapi import FastAPI

from ablate.backend.errors import AblateError


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind ``host:port`` (0: a free port). Holding the socket means no other process can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise AblateError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


@dataclass
class BackgroundServer:
    app: FastAPI
    url: str
    _server: uvicorn.Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def start_background_server(
    app: FastAPI, sock: socket.socket, *, log_level: str = "warning", ready_timeout_s: float = 60.0
) -> BackgroundServer:
    """Serve ``app`` on ``sock`` in a daemon thread and return once ``/readyz`` answers 200."""
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="ablate-server"
    )
    thread.start()
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    background = BackgroundServer(app=app, url=f"http://{shown_host}:{port}", _server=server, _thread=thread)
    deadline = time.monotonic() + ready_timeout_s
    last = "no answer"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                raise AblateError(f"the server on {background.url} exited during start-up")
            try:
                response = client.get(f"{background.url}/readyz")
                if response.status_code == 200:
                    return background
                last = f"{response.status_code} {response.text[:200]}"
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.05)  # polling the port until it answers
    background.stop()
    raise AblateError(f"the server on {background.url} was not ready after {ready_timeout_s:.0f}s: {last}")
