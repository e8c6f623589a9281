"""Queueing a study's scheduled runs: one definition for a new study's first rounds and the rounds an
adaptive study adds later."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ablate.backend.db.models import Run, RunSource, RunStatus, Study


def queue_runs(session: Session, study: Study, cells: Iterable[tuple[int, int, int, int]]) -> int:
    """Queue a run of ``study`` for each (release id, variant id, workload id, repeat), in that order
    after every run queued so far; returns how many. The caller holds the queue lock, so that the
    ``max(queue_order)`` read here cannot race another writer."""
    base = (session.scalar(select(func.max(Run.queue_order))) or 0) + 1
    runs = [
        Run(
            study_id=study.id,
            release_id=release_id,
            cluster_id=study.cluster_id,
            variant_id=variant_id,
            workload_id=workload_id,
            repeat=repeat,
            status=RunStatus.queued.value,
            source=RunSource.scheduled.value,
            attempt=1,
            queue_order=base + n,
            provenance={},
            environment={},
        )
        for n, (release_id, variant_id, workload_id, repeat) in enumerate(cells)
    ]
    session.add_all(runs)
    session.flush()
    return len(runs)
