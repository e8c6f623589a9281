"""The webhook worker of an API process: a thread that delivers due outbox rows and turns new
verdicts into events, a :class:`SupervisedLoop` like the in-process dispatcher (an error is logged, the
state says ``restarting``, and the loop tries again after a backoff doubling from 0.5 s to 30 s)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass

import httpx
from sqlalchemy.exc import SQLAlchemyError

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.services.supervised import State, SupervisedLoop
from ablate.backend.services.webhooks import delivery, watch

log = logging.getLogger(__name__)

BATCH = 8  # deliveries claimed at once (each leased for webhook_lease_s)


@dataclass(frozen=True)
class WorkerStatus:
    state: State
    restarts: int
    last_error: str | None
    owner: str


class WebhookWorker(SupervisedLoop):
    """``start()`` / ``stop()``; :meth:`step` is one pass (claim, deliver, record; then the watch)."""

    def __init__(self, settings: Settings, database: Database) -> None:
        super().__init__("ablate-webhooks", settings.webhook_poll_s)
        self.settings = settings
        self.database = database
        self.owner = f"webhooks@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._client: httpx.Client | None = None

    def status(self) -> WorkerStatus:
        loop = self.loop_status()
        return WorkerStatus(loop.state, loop.restarts, loop.last_error, self.owner)

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
            if self.stopping:
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

    def on_error(self, exc: Exception, delay_s: float) -> None:
        log.warning("webhook worker: %s; retrying in %.1f s", exc, delay_s)

    def cleanup(self) -> None:
        if self._client is not None:
            self._client.close()
