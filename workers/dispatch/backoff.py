"""A delay before an infrastructure failure goes back to the queue, so a transient fault can clear.

Without it a run whose node could not write its log (a read-only or full disk) used its three
attempts within a second. A retryable outcome is held here instead: the dispatcher keeps the run's
lease (renewed each tick, as for a run in flight; a cancel still stops it), the run's ``error`` says
which attempt failed and when the next starts, and once the delay has passed the outcome is recorded
as before (queued again with ``attempt + 1``). The delay doubles per attempt from
``retry_backoff_s`` up to ``retry_backoff_max_s``; 0 queues again at once. A dispatcher that stops
queues what it holds at once; one that dies leaves the leases to expire, and the reaper re-queues.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.orm import Session

from ablate.backend.config import Settings
from ablate.backend.db.models import Run
from ablate.workers.dispatch.execution import Outcome

RUNNING = "running"


@dataclass
class Held:
    due: float  # time.monotonic() at which it goes back to the queue
    outcome: Outcome
    delay_s: float


class Backoff:
    """The retryable outcomes one dispatcher holds back, by run id."""

    def __init__(self, settings: Settings) -> None:
        self.delay_s = settings.retry_backoff.delay_s
        self.max_attempts = settings.max_attempts
        self.held: dict[int, Held] = {}

    def hold(self, outcomes: list[Outcome], now: float) -> tuple[list[Outcome], list[Held]]:
        """Split finished outcomes: those to record now, and those newly held (to note on their runs)."""
        record: list[Outcome] = []
        new: list[Held] = []
        for out in outcomes:
            delay = self.delay_s(out.attempt)
            if out.retryable and out.attempt < self.max_attempts and delay > 0:
                held = Held(now + delay, out, delay)
                self.held[out.run_id] = held
                new.append(held)
            else:
                record.append(out)
        return record, new

    def due(self, now: float) -> list[Outcome]:
        """The held outcomes whose delay has passed, taken out."""
        ready = [run_id for run_id, h in self.held.items() if h.due <= now]
        return [self.held.pop(run_id).outcome for run_id in ready]

    def put_back(self, outcomes: list[Outcome], now: float) -> None:
        """Due outcomes that could not be recorded (a database error): due again at once."""
        for out in outcomes:
            self.held[out.run_id] = Held(now, out, 0.0)

    def drop(self, run_ids: set[int]) -> None:
        """Runs no longer ours (cancelled, or the lease lost): nothing to queue again."""
        for run_id in run_ids:
            self.held.pop(run_id, None)

    def take_all(self) -> list[Outcome]:
        outcomes = [h.outcome for h in self.held.values()]
        self.held.clear()
        return outcomes

    def next_due(self) -> float | None:
        return min((h.due for h in self.held.values()), default=None)


def note_waiting(session: Session, owner: str, held: list[Held]) -> None:
    """Say on each held run which attempt failed and when the next one starts (still this dispatcher's)."""
    for h in held:
        out = h.outcome
        reason = f"attempt {out.attempt} failed ({out.result.error}); retrying in {h.delay_s:g} s"
        session.execute(
            update(Run)
            .where(Run.id == out.run_id, Run.lease_owner == owner, Run.status == RUNNING)
            .values(error=reason)
            .execution_options(synchronize_session=False)
        )
