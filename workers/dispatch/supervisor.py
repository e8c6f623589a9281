"""The in-process dispatcher of ``ablate serve``, supervised: a database or Ray error does not end it.

The bare loop (:meth:`Dispatcher.run_forever`) ends on the first error, which suits ``ablate
dispatcher`` (its process exits and compose restarts it) but not a thread inside the API server,
which would go on answering while nothing runs. Here it is a :class:`SupervisedLoop`: each failed
iteration is logged, the state says ``restarting`` (``/readyz`` reports it) and the loop tries again
after a backoff that doubles from 0.5 s to 30 s, back to the first after an iteration goes through.

A database error keeps the dispatcher and its runs in flight: the outcomes it could not record are
recorded on the next try, and leases not renewed meanwhile are renewed (or, past ``lease_s``, the
runs are re-queued by the reaper as any expired claim is). Any other error (Ray, or a bug) retires
the dispatcher, giving its runs back to the queue, and starts a fresh one.

Ray lost (the dispatcher's node dead, e.g. its raylet killed, or the GCS gone; see
:func:`~ablate.workers.dispatch.ray_runtime.lost_reason`): the dispatcher stops before failing anything
as unplaceable, its runs go back to the queue (same attempt), every queued run of its clusters says
``waiting for Ray: ...`` in its error, and the process leaves Ray; each retry then starts its local Ray
afresh (or re-joins ``ABLATE_RAY_ADDRESS``) until one connects, and the waiting notes are cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Literal

from sqlalchemy.exc import SQLAlchemyError

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.domain.runner import Runner
from ablate.backend.services.supervised import LoopStatus, SupervisedLoop
from ablate.workers.dispatch import claims, ray_runtime
from ablate.workers.dispatch.dispatcher import Dispatcher

log = logging.getLogger(__name__)

RayState = Literal["connected", "lost", "disconnected"]


@dataclass(frozen=True)
class SupervisorStatus(LoopStatus):
    """What ``/readyz`` reports of the in-process dispatcher: its loop's status, its id and Ray's."""

    owner: str | None  # the dispatcher's id in the database (a fresh one after a Ray error)
    ray: RayState  # lost: the dispatcher's Ray is gone and is being restarted (or re-joined)
    ray_address: str | None  # the GCS address connected to
    ray_lost: str | None  # why Ray was lost, while it is


class SupervisedDispatcher(SupervisedLoop):
    """Runs a :class:`Dispatcher` in a thread, retrying with backoff after errors; ``start``/``stop``."""

    def __init__(
        self,
        settings: Settings,
        database: Database,
        *,
        runners: Mapping[str, Callable[[], Runner]] | None = None,
    ) -> None:
        super().__init__("ablate-dispatcher", settings.dispatcher_poll_s)
        self.settings = settings
        self.database = database
        self.runners = runners  # runner factories handed to each dispatcher (tests)
        self.dispatcher: Dispatcher | None = None
        self._ray_lost: str | None = None
        self._waiting: list[int] = []  # clusters whose queued runs were told they wait for Ray

    def status(self) -> SupervisorStatus:
        loop = self.loop_status()
        with self._lock:
            current = self.dispatcher
            lost = self._ray_lost
        owner = current.owner if current is not None else None
        connected = current is not None and current.submitter.connected
        ray: RayState = "lost" if lost else "connected" if connected else "disconnected"
        address = current.ray_address if connected and current is not None else None
        return SupervisorStatus(**asdict(loop), owner=owner, ray=ray, ray_address=address, ray_lost=lost)

    def start(self) -> None:
        """Connect to Ray on the calling thread (``ray.init`` installs signal handlers: the event
        loop's thread), then loop in a background thread. A Ray that cannot be reached at start-up
        fails the start, as before: nothing would ever run."""
        self.dispatcher = Dispatcher(self.settings, self.database, runners=self.runners)
        self.dispatcher.connect()
        super().start()

    def prepare(self) -> None:
        if self.dispatcher is None:  # retired after an error: a fresh one
            fresh = Dispatcher(self.settings, self.database, runners=self.runners)
            fresh.connect()
            self.dispatcher = fresh
            if self._ray_lost:
                log.warning("dispatcher %s: Ray is back at %s", fresh.owner, fresh.ray_address)
        with self._lock:
            self._ray_lost = None
        if self._waiting:
            with self.database.transaction() as session:
                claims.clear_waiting_for_ray(session, self._waiting)
            self._waiting = []

    def step(self) -> bool:
        assert self.dispatcher is not None  # prepare() made one
        return self.dispatcher.step(wait_s=min(0.2, self.poll_s))

    def on_error(self, exc: Exception, delay_s: float) -> None:
        if isinstance(exc, SQLAlchemyError):
            log.warning("dispatcher: database error, retrying in %.1f s: %s", delay_s, exc)
        elif lost := self._lost_reason(exc):
            log.warning("dispatcher: Ray lost (%s); reconnecting in %.1f s", lost, delay_s)
            self._on_ray_lost(lost)
        else:
            log.exception("dispatcher failed; starting a fresh one in %.1f s", delay_s)
            self._retire()

    def cleanup(self) -> None:
        self._retire()

    def _lost_reason(self, exc: Exception) -> str | None:
        """Why Ray is lost when ``exc`` came from that (None for other errors)."""
        if isinstance(exc, ray_runtime.RayLost):
            return str(exc)
        if self._ray_lost:  # connecting again failed: still lost
            return f"{self._ray_lost}; reconnecting failed: {type(exc).__name__}: {exc}"[:300]
        try:
            return ray_runtime.lost_reason()
        except Exception:  # asking Ray failed as well
            return f"{type(exc).__name__}: {exc}"[:300]

    def _on_ray_lost(self, reason: str) -> None:
        """Give the runs back, tell the queued runs why they wait, and leave the lost Ray."""
        with self._lock:
            self._ray_lost = reason
        dispatcher = self.dispatcher
        try:
            if dispatcher is not None:
                self._waiting = sorted(set(self._waiting) | set(dispatcher.served()))
            with self.database.transaction() as session:
                claims.note_waiting_for_ray(session, self._waiting, reason)
        except Exception as exc:  # the database may be down too; the runs wait all the same
            log.warning("could not note on the queued runs that they wait for Ray: %s", exc)
        self._retire()
        ray_runtime.disconnect()

    def _retire(self) -> None:
        """Give the dispatcher's runs back to the queue and forget it; an error here (the database
        still down) leaves its claims to expire, after which the reaper re-queues them."""
        dispatcher, self.dispatcher = self.dispatcher, None
        if dispatcher is None:
            return
        try:
            dispatcher.shutdown()
        except Exception as exc:
            log.warning(
                "dispatcher %s: could not give its runs back (%s); its leases will expire",
                dispatcher.owner,
                exc,
            )
