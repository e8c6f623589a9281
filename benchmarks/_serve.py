"""``ablate serve`` for a benchmark: a free port, and the wait until the server answers ``/readyz``."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(
    proc: subprocess.Popen[Any], base: str, timeout_s: float, also: Callable[[], bool] = lambda: True
) -> None:
    """Return once ``base`` answers ``/readyz`` and ``also()`` holds; raise if the process ends first
    or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200 and also():
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.1)
