"""Serving the app: the HTTP protocol with bounded request heads (every server: ``ablate serve``,
compose's uvicorn, the demo), and from a background thread (the demo's embedded service and the
tests' live server)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ablate.backend.config import Settings, get_settings
from ablate.backend.errors import AblateError

log = logging.getLogger(__name__)


class _HeadTooLarge(Exception):
    """Raised from the parser's headers-complete callback: the app must not see this request."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounds on the request head, enforced while it arrives.

    httptools itself keeps any URL and header however long (four 64 MB headers cost 282 MiB and were
    answered 200), and uvicorn sets no limit. Here a request line past ``max_url_bytes`` is answered
    414 and a head past ``max_header_bytes`` 431, and the connection closed, as soon as the bytes
    received for the head pass the bound (at most one read of the socket more is held), before the
    app is called. Limits: :attr:`limits`, else the settings (compose names this class by import
    string: ``uvicorn --http ablate.backend.server:BoundedHttpToolsProtocol``).
    """

    limits: tuple[int, int] | None = None  # (max_url_bytes, max_header_bytes)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.limits is None:
            cfg = get_settings()
            self.limits = (cfg.max_url_bytes, cfg.max_header_bytes)
        self._in_head = True  # bytes received now belong to a request head
        self._head_bytes = 0
        self._refusal: int | None = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def _over(self, head_bytes: int) -> int | None:
        max_url, max_head = self.limits or (0, 0)
        if len(getattr(self, "url", b"")) > max_url:  # set on the first byte of a request
            return 414
        return 431 if head_bytes > max_head else None

    def on_headers_complete(self) -> None:
        self._in_head = False
        # Exact sizes here: the bytes received may hold the start of a body as well.
        self._refusal = self._over(len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers))
        if self._refusal is not None:
            raise _HeadTooLarge  # httptools turns it into a parser error: send_400_response below
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._refusal is None and self._in_head and not self.transport.is_closing():
            self._refusal = self._over(self._head_bytes)
            if self._refusal is not None:
                self.send_400_response("")

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            super().send_400_response(msg)
            return
        max_url, max_head = self.limits or (0, 0)
        text = (
            f"request line longer than {max_url} bytes"
            if self._refusal == 414
            else f"request headers larger than {max_head} bytes"
        )
        log.warning("refused a request from %s: %s", self.client, text)
        content = [STATUS_LINE[self._refusal]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        body = text.encode("ascii")
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


def bounded_http(settings: Settings) -> type[BoundedHttpToolsProtocol]:
    """The protocol class with ``settings``' bounds (uvicorn's ``http=``)."""
    limits = (settings.max_url_bytes, settings.max_header_bytes)
    return type("BoundedHttp", (BoundedHttpToolsProtocol,), {"limits": limits})


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
    settings = getattr(app.state, "settings", None) or get_settings()
    config = uvicorn.Config(
        app,
        http=bounded_http(settings),
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
