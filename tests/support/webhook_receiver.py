"""A real HTTP receiver for webhook tests: ``http.server`` in a thread that records every request
(headers and raw body) and answers with the next scripted status (200 once the script is used up).
``hold()`` makes the next request wait, unanswered, until ``release()``: a delivery in flight."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when the body was read

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def signature_ok(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("x-ablate-signature-256", ""))


class Receiver:
    def __init__(self, statuses: list[int] | None = None) -> None:
        self.received: list[Received] = []
        self.statuses = list(statuses or [])
        self._cond = threading.Condition()
        self._hold = threading.Event()
        self._held = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                item = Received(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                with receiver._cond:
                    receiver.received.append(item)
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver._cond.notify_all()
                if receiver._hold.is_set():
                    receiver._held.set()
                    while receiver._hold.is_set():  # answer nothing until released
                        time.sleep(0.05)
                    return
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def hold(self) -> None:
        self._hold.set()

    def wait_held(self, timeout_s: float) -> bool:
        return self._held.wait(timeout_s)

    def release(self) -> None:
        self._hold.clear()

    def wait_for(self, count: int, timeout_s: float = 60.0, event: str | None = None) -> list[Received]:
        """The requests once ``count`` (of ``event``, if given) have arrived; AssertionError after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                got = [r for r in self.received if event is None or r.headers.get("x-ablate-event") == event]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{len(got)} of {count} webhook request(s) after {timeout_s}s: {got}"
                    )
                self._cond.wait(left)

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
