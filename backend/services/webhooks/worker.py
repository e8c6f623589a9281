"""The webhook worker of an API process: a thread that delivers due outbox rows and turns new
verdicts into events, supervised like the in-process dispatcher (an error is logged, the state says
``restarting``, and the loop tries again after a backoff doubling from 0.5 s to 30 s)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Literal

import httpx
from sqlalchemy.exc import SQLAlchemyError

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.services.webhooks import delivery, watch

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
BATCH = 8  # deliveries claimed at once (each leased for webhook_lease_s)

State = Literal["running", "restarting", "stopped"]


@dataclass(frozen=True)
class WorkerStatus:
    state: State
    restarts: int
    last_error: str | None
    owner: str


class WebhookWorker:
    """``start()`` / ``stop()``; :meth:`step` is one pass (claim, deliver, record; then the watch)."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self.owner = f"webhooks@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._state: State = "stopped"
        self._restarts = 0
        self._last_error: str | None = None
        self._client: httpx.Client | None = None

    def status(self) -> WorkerStatus:
        with self._lock:
            return WorkerStatus(self._state, self._restarts, self._last_error, self.owner)

    def start(self) -> None:
        self._stop.clear()
        self._state = "running"
        self._thread = threading.Thread(target=self._supervise, name="ablate-webhooks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the current attempt; deliveries still leased go out again once their lease ends."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _http(self) -> httpx.Client:
        if self._client is None:
            # no proxy from the environment: the target checked is the one connected to
            self._client = httpx.Client(
                timeout=self.settings.webhook_timeout_s, follow_redirects=False, trust_env=False
            )
        return self._client

    def deliver_due(self) -> int:
        """Claim and deliver what is due; returns how many attempts were made."""
        with self.database.transaction() as session:
            claimed = delivery.claim_due(
                session, self.owner, limit=BATCH, lease_s=self.settings.webhook_lease_s
            )
        for due in claimed:
            outcome = delivery.send(self._http(), due, allow_private=self.settings.webhook_allow_private)
            with self.database.transaction() as session:
                status = delivery.record(session, self.owner, due, outcome, self.settings)
            if not outcome.ok:
                log.warning(
                    "webhook delivery %s (%s, attempt %d) to %s failed: %s; now %s",
                    due.delivery_id,
                    due.event,
                    due.attempt,
                    due.url,
                    outcome.error,
                    status,
                )
        return len(claimed)

    def check_releases(self) -> int:
        """Look again at releases with new results; returns how many were looked at. A release whose
        comparison fails for another reason than the database is logged and passed over (it must not
        hold up the others); a database error ends the pass and is retried by the supervisor."""
        with self.database.read() as session:
            dirty = watch.dirty_releases(session)
            listening = watch.listening(session) if dirty else False
        if dirty and not listening:
            with self.database.transaction() as session:
                watch.mark_all_checked(session)
            return len(dirty)
        for release_id, version in dirty:
            if self._stop.is_set():
                break
            try:
                watch.check_release(self.database, self.settings, release_id, version)
            except SQLAlchemyError:
                raise
            except Exception:
                log.exception("webhook worker: the verdicts of release %d could not be checked", release_id)
                with self.database.transaction() as session:
                    watch.mark_checked(session, release_id, version)
        return len(dirty)

    def step(self) -> bool:
        """One pass; True when it did something (the loop then goes on without waiting)."""
        busy = self.deliver_due() > 0
        busy = self.check_releases() > 0 or busy
        return busy

    def _set(self, state: State, error: BaseException | None = None) -> None:
        with self._lock:
            self._state = state
            if error is not None:
                self._restarts += 1
                self._last_error = f"{type(error).__name__}: {error}"[:300]

    def _supervise(self) -> None:
        delay = FIRST_BACKOFF_S
        while not self._stop.is_set():
            try:
                self._set("running")
                while not self._stop.is_set():
                    busy = self.step()
                    delay = FIRST_BACKOFF_S
                    if not busy:
                        self._stop.wait(self.settings.webhook_poll_s)
            except Exception as exc:
                self._set("restarting", exc)
                log.warning("webhook worker: %s; retrying in %.1f s", exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
        if self._client is not None:
            self._client.close()
        self._set("stopped")
