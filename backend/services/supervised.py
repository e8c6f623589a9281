"""A supervised background loop of a long-lived process (the API server's webhook worker, its in-process
dispatcher): an error does not end it.

A thread calls :meth:`SupervisedLoop.step` until stopped, waiting ``poll_s`` after a pass that found
nothing to do. An error in a pass is logged, the state says ``restarting`` (``/readyz`` reports it) and
the loop tries again after a backoff that doubles from :data:`FIRST_BACKOFF_S` to :data:`MAX_BACKOFF_S`,
back to the first once a pass goes through. Subclasses give :meth:`step` and may give :meth:`prepare`
(before each try), :meth:`on_error` (what an error means beyond the log line) and :meth:`cleanup`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ablate.backend.config import BackoffPolicy

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
_BACKOFF = BackoffPolicy(FIRST_BACKOFF_S, MAX_BACKOFF_S)

State = Literal["running", "restarting", "stopped"]


@dataclass(frozen=True)
class LoopStatus:
    state: State
    restarts: int  # failed passes since start, each followed by a retry
    last_error: str | None  # "OperationalError: ..." of the latest, cut to 300 characters
    seconds_since_error: float | None


class StoppableThread:
    """One daemon thread and the event that asks it to stop: the start/stop both the supervised loops
    and a dispatcher driven beside tests share (``target`` watches :attr:`stop_event`)."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.name = name
        self.target = target
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.stop_event.clear()
        self._thread = threading.Thread(target=self.target, name=self.name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True while started and not yet stopped, and the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the thread to stop and wait at most ``timeout_s`` for it to end."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None


class SupervisedLoop:
    """``start()`` / ``stop()`` / :meth:`loop_status`; subclasses implement :meth:`step`."""

    def __init__(self, thread_name: str, poll_s: float) -> None:
        self.thread_name = thread_name
        self.poll_s = poll_s
        self._runner = StoppableThread(thread_name, self._supervise)
        self._stop = self._runner.stop_event
        self._lock = threading.Lock()
        self._state: State = "stopped"
        self._restarts = 0
        self._last_error: str | None = None
        self._error_at: float | None = None

    # -- what a subclass gives
    def step(self) -> bool:
        """One pass; True when it did something (the loop then goes on without waiting)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Before each try, on the loop's thread (e.g. build afresh what an error retired)."""

    def on_error(self, exc: Exception, delay_s: float) -> None:
        """After a failed pass, before the backoff wait: log it (subclasses may do more)."""
        log.warning("%s: %s; retrying in %.1f s", self.thread_name, exc, delay_s)

    def cleanup(self) -> None:
        """Once, on the loop's thread, after it was asked to stop."""

    # -- the loop
    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called: long passes check it to end early."""
        return self._stop.is_set()

    @property
    def thread_alive(self) -> bool:
        """True while the loop's thread runs (started and not stopped)."""
        return self._runner.alive

    def loop_status(self) -> LoopStatus:
        with self._lock:
            since = None if self._error_at is None else round(time.monotonic() - self._error_at, 1)
            return LoopStatus(self._state, self._restarts, self._last_error, since)

    def start(self) -> None:
        self._state = "running"
        self._runner.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the current pass (waiting at most ``timeout_s`` for it)."""
        self._runner.stop(timeout_s)

    def _set(self, state: State, error: BaseException | None = None) -> None:
        with self._lock:
            self._state = state
            if error is not None:
                self._restarts += 1
                self._last_error = f"{type(error).__name__}: {error}"[:300]
                self._error_at = time.monotonic()

    def _supervise(self) -> None:
        failures = 0  # in a row: the backoff starts again once a pass goes through
        while not self._stop.is_set():
            try:
                self.prepare()
                self._set("running")
                while not self._stop.is_set():
                    busy = self.step()
                    failures = 0
                    if not busy:
                        self._stop.wait(self.poll_s)
            except Exception as exc:
                failures += 1
                delay = _BACKOFF.delay_s(failures)
                self._set("restarting", exc)
                self.on_error(exc, delay)
                self._stop.wait(delay)
        self.cleanup()
        self._set("stopped")
