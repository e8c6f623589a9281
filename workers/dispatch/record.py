"""Recording finished executions: queue the retryable ones again, record the rest as one batch.

Runs inside the dispatcher's recording transaction (after the one that claims the next runs). Results go
through :func:`ablate.backend.services.ingest.record_run_results`, the ingest behind
``POST /api/v1/results``, guarded by the runs' leases: a run cancelled or taken over meanwhile records
nothing. Study statuses are left to the caller, which refreshes them once per transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from sqlalchemy.orm import Session

from ablate.backend.config import Settings
from ablate.backend.domain.placement import excluded_node_entries
from ablate.backend.services.images import store_contents
from ablate.backend.services.ingest import FinishedRun, HeldRun, InvalidResults, record_run_results
from ablate.workers.dispatch import leases, logs
from ablate.workers.dispatch.execution import Outcome

log = logging.getLogger(__name__)


class Recorder:
    """Writes one dispatcher's outcomes (as ``owner``, under the lease guard)."""

    def __init__(self, settings: Settings, owner: str) -> None:
        self.settings = settings
        self.owner = owner

    def record(self, session: Session, outcomes: list[Outcome]) -> set[int]:
        """Record finished runs (or queue them again); returns the studies to refresh."""
        # What the images hold is a fact about the images, whatever became of the runs.
        store_contents(session, [found for o in outcomes for found in o.images])
        retry = [o for o in outcomes if o.retryable and o.attempt < self.settings.max_attempts]
        for out in retry:
            reason = f"attempt {out.attempt} failed ({out.result.error}); queued again"
            avoid = excluded_node_entries(out.excluded)
            if leases.requeue(
                session, self.owner, out.run_id, reason=reason, next_attempt=True, provenance=avoid
            ):
                log.warning("run %s: %s", out.run_id, reason)
                # the attempt's logs stay in its own folder; say there why it did not finish the run
                logs.note_outcome(self.settings.log_dir, out.run_id, out.attempt, "retried", reason)
        final = [o for o in outcomes if o not in retry]
        if not final:
            return set()
        # One guarded UPDATE locks every run to record (or finds it cancelled / taken over).
        held = leases.hold_for_finish(
            session, self.owner, [o.run_id for o in final], lease_s=self.settings.lease_s
        )
        items = []
        for out in final:
            run = held.get(out.run_id)
            if run is None:
                log.info("run %s was cancelled or taken over; its result is dropped", out.run_id)
                continue
            items.append(finished_run(out, run))
        try:  # one batch: one statement per table
            return record_run_results(session, items, refresh_studies=False)
        except InvalidResults as exc:  # raised before anything is written
            for i, problem in exc.by_index.items():
                res = items[i].result
                failed = replace(res, status="failed", metrics={}, series={}, better={})
                failed.error = f"the runner's result is invalid: {problem}"
                failed.failure_kind = "benchmark"
                items[i] = replace(items[i], result=failed)
            return record_run_results(session, items, refresh_studies=False)

    def give_back(self, session: Session, run_ids: Iterable[int]) -> None:
        """The dispatcher stops: its in-flight runs go back to the queue, same attempt (not their fault)."""
        for run_id in run_ids:
            leases.requeue(
                session, self.owner, run_id, reason="dispatcher stopped; queued again", next_attempt=False
            )


def finished_run(out: Outcome, run: HeldRun) -> FinishedRun:
    """What ingest records for the outcome of a run held for finishing (lease cleared, last progress kept)."""
    res = out.result
    if out.retryable and res.error:
        res = replace(res, error=f"{res.error} (after {out.attempt} attempt(s))")
    started_at = out.started_at
    if started_at and out.finished_at and out.finished_at < started_at:
        started_at = None
    if out.progress:
        run.total_steps = out.progress[1]
        run.extra.update(current_step=out.progress[0], total_steps=out.progress[1])
    run.extra["lease_expires_at"] = None
    return FinishedRun(run, res, started_at=started_at, finished_at=out.finished_at)
