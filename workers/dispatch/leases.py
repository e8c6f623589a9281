"""Leases: what keeps claimed runs and the dispatcher itself alive, and what ends them.

:func:`renew_leases` / :func:`write_progress` keep the runs :mod:`.claims` took, :func:`hold_for_finish` /
:func:`requeue` end them, :func:`reap_expired` recovers the runs of dispatchers that died, and
:func:`announce` / :func:`retire` keep the dispatcher's row in ``dispatchers`` (the clusters it serves,
see :func:`.claims.served_clusters`).

Every write here is guarded by ``lease_owner = me AND status = 'running'``: once a lease expired and
someone else re-queued or took the run, or a user cancelled it, the stale dispatcher's writes match
nothing, which is what makes recording exactly-once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, update
from sqlalchemy.orm import Session

from ablate.backend.db.base import among_ids, utcnow
from ablate.backend.db.models import DispatcherPresence, Run, RunStatus
from ablate.backend.services import dispatchers
from ablate.backend.services.ingest import HeldRun
from ablate.workers.dispatch import devices

RUNNING = RunStatus.running.value
QUEUED = RunStatus.queued.value


def _mine(owner: str) -> ColumnElement[bool]:
    return and_(Run.lease_owner == owner, Run.status == RUNNING)


def _update_mine(session: Session, owner: str, run_id: int, values: dict[str, object]) -> bool:
    """Set ``values`` on the run if ``owner`` still holds it; whether it did."""
    res = session.execute(
        update(Run)
        .where(Run.id == run_id, _mine(owner))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    # Session.execute is typed as returning Result for any statement (no overload for DML); an UPDATE's
    # result is a CursorResult, which has rowcount.
    return bool(res.rowcount)  # type: ignore[attr-defined]


def renew_leases(
    session: Session, owner: str, run_ids: Iterable[int], *, lease_s: float, now: datetime | None = None
) -> set[int]:
    """Extend the leases of ``run_ids`` still held; returns those. A missing id was cancelled, or its
    lease was lost to the reaper: its execution must stop and must not record anything."""
    ids = list(run_ids)
    if not ids:
        return set()
    now = now or utcnow()
    stmt = (
        update(Run)
        .where(among_ids(session, Run.id, ids), _mine(owner))
        .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    )
    return set(session.scalars(stmt))


def write_progress(
    session: Session, owner: str, run_id: int, step: int, total: int, throughput: float | None
) -> bool:
    values: dict[str, object] = {"current_step": step, "total_steps": total}
    if throughput is not None:
        values["latest_throughput"] = float(throughput)
    return _update_mine(session, owner, run_id, values)


def hold_for_finish(
    session: Session, owner: str, run_ids: Sequence[int], *, lease_s: float, now: datetime | None = None
) -> dict[int, HeldRun]:
    """Lock runs for recording their results: the guarded UPDATE takes the row locks (PostgreSQL) or
    the write lock (SQLite) first, so a concurrent cancel or reaper waits for us or wins outright.
    Returns the runs still held, as the same statement read them (``RETURNING``; what recording reads of
    a run, no ORM objects); an id missing was cancelled or taken over."""
    ids = list(run_ids)
    if not ids:
        return {}
    now = now or utcnow()
    stmt = (
        update(Run)
        .where(among_ids(session, Run.id, ids), _mine(owner))
        .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
        .returning(Run.id, Run.status, Run.study_id, Run.release_id, Run.total_steps)
        .execution_options(synchronize_session=False)
    )
    return {
        r.id: HeldRun(r.id, r.status, r.study_id, r.release_id, r.total_steps) for r in session.execute(stmt)
    }


def requeue(
    session: Session,
    owner: str,
    run_id: int,
    *,
    reason: str,
    next_attempt: bool,
    provenance: dict[str, Any] | None = None,
) -> bool:
    """Give a run back to the queue (an infrastructure failure to retry, or this dispatcher stopping).
    ``provenance``, when given, replaces the run's (the nodes its next attempts must avoid)."""
    values: dict[str, object] = {
        "status": QUEUED,
        "lease_owner": None,
        "lease_expires_at": None,
        "started_at": None,
        "current_step": None,
        "total_steps": None,
        "latest_throughput": None,
        "error": reason,
        "updated_at": utcnow(),
    }
    if next_attempt:
        values["attempt"] = Run.attempt + 1
    if provenance is not None:
        values["provenance"] = provenance
    return _update_mine(session, owner, run_id, values)


@dataclass(frozen=True)
class Reaped:
    requeued: list[int]
    failed: list[int]
    study_ids: set[int]


def reap_expired(session: Session, *, max_attempts: int, now: datetime | None = None) -> Reaped:
    """Runs whose lease expired (their dispatcher died or hung): queue them again with attempt + 1, or
    fail them once ``max_attempts`` attempts are used up."""
    now = now or utcnow()
    expired = and_(Run.status == RUNNING, Run.lease_expires_at.is_not(None), Run.lease_expires_at < now)
    requeued = session.execute(
        update(Run)
        .where(expired, Run.attempt < max_attempts)
        .values(
            status=QUEUED,
            attempt=Run.attempt + 1,
            lease_owner=None,
            lease_expires_at=None,
            started_at=None,
            current_step=None,
            total_steps=None,
            latest_throughput=None,
            error="lease expired (dispatcher lost); queued again",
            updated_at=now,
        )
        .returning(Run.id, Run.study_id, Run.attempt)
        .execution_options(synchronize_session=False)
    ).all()
    failed = session.execute(
        update(Run)
        .where(expired, Run.attempt >= max_attempts)
        .values(
            status=RunStatus.failed.value,
            failure_kind="infrastructure",
            error=f"infrastructure: lease expired after {max_attempts} attempts",
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
        )
        .returning(Run.id, Run.study_id, Run.attempt)
        .execution_options(synchronize_session=False)
    ).all()
    # The lost attempts' devices wait for their processes to be confirmed gone (devices.Fence).
    devices.expire(session, [(r.id, r.attempt - 1) for r in requeued] + [(r.id, r.attempt) for r in failed])
    studies = {r.study_id for r in [*requeued, *failed] if r.study_id is not None}
    return Reaped([r.id for r in requeued], [r.id for r in failed], studies)


def announce(
    session: Session,
    owner: str,
    *,
    gcs_address: str,
    served: Sequence[int],
    lease_s: float,
    now: datetime | None = None,
) -> None:
    """Say that ``owner`` runs and serves the clusters ``served`` until about three leases from now
    (renewed every ``lease_s / 3``): what lets a queued run say that no dispatcher serves its cluster."""
    now = now or utcnow()
    values = {
        "gcs_address": gcs_address,
        "served_cluster_ids": sorted(served),
        "heartbeat_at": now,
        "expires_at": now + timedelta(seconds=3 * lease_s),
    }
    res = session.execute(
        update(DispatcherPresence)
        .where(DispatcherPresence.owner == owner)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE's result is a CursorResult
        session.add(DispatcherPresence(owner=owner, **values))
    # Rows of stopped or killed dispatchers serve nothing; kept a while, they tell when a cluster last
    # had a dispatcher ("last seen 12 min ago"), then go.
    session.execute(
        delete(DispatcherPresence).where(DispatcherPresence.expires_at < now - dispatchers.PRESENCE_KEPT)
    )


def retire(session: Session, owner: str) -> None:
    """``owner`` stops: it serves nothing any more (its row, expired now, says when it was last seen)."""
    now = utcnow()
    session.execute(
        update(DispatcherPresence)
        .where(DispatcherPresence.owner == owner)
        .values(heartbeat_at=now, expires_at=now)
        .execution_options(synchronize_session=False)
    )
