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
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from sqlalchemy.exc import SQLAlchemyError

from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.services.supervised import LoopStatus, SupervisedLoop
from ablate.workers.dispatch.dispatcher import Dispatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SupervisorStatus(LoopStatus):
    """What ``/readyz`` reports of the in-process dispatcher: its loop's status and its id."""

    owner: str | None  # the dispatcher's id in the database (a fresh one after a Ray error)


class SupervisedDispatcher(SupervisedLoop):
    """Runs a :class:`Dispatcher` in a thread, retrying with backoff after errors; ``start``/``stop``."""

    def __init__(self, settings: Settings, database: Database) -> None:
        super().__init__("ablate-dispatcher", settings.dispatcher_poll_s)
        self.settings = settings
        self.database = database
        self.dispatcher: Dispatcher | None = None

    def status(self) -> SupervisorStatus:
        loop = self.loop_status()
        dispatcher = self.dispatcher
        owner = dispatcher.owner if dispatcher is not None else None
        return SupervisorStatus(**asdict(loop), owner=owner)

    def start(self) -> None:
        """Connect to Ray on the calling thread (``ray.init`` installs signal handlers: the event
        loop's thread), then loop in a background thread. A Ray that cannot be reached at start-up
        fails the start, as before: nothing would ever run."""
        self.dispatcher = Dispatcher(self.settings, self.database)
        self.dispatcher.connect()
        super().start()

    def prepare(self) -> None:
        if self.dispatcher is None:  # retired after an error: a fresh one
            fresh = Dispatcher(self.settings, self.database)
            fresh.connect()
            self.dispatcher = fresh

    def step(self) -> bool:
        assert self.dispatcher is not None  # prepare() made one
        return self.dispatcher.step(wait_s=min(0.2, self.poll_s))

    def on_error(self, exc: Exception, delay_s: float) -> None:
        if isinstance(exc, SQLAlchemyError):
            log.warning("dispatcher: database error, retrying in %.1f s: %s", delay_s, exc)
        else:
            log.exception("dispatcher failed; starting a fresh one in %.1f s", delay_s)
            self._retire()

    def cleanup(self) -> None:
        self._retire()

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
