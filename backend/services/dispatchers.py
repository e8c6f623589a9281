"""Which clusters running dispatchers serve, from what they announce (the ``dispatchers`` table): a
queued run of a cluster that no running dispatcher serves waits for nothing, and says so."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import Cluster, DispatcherPresence


def served_cluster_ids(session: Session, now: datetime | None = None) -> set[int]:
    """The clusters some running dispatcher (its announcement not expired) serves."""
    now = now or utcnow()
    lists = session.scalars(
        select(DispatcherPresence.served_cluster_ids).where(DispatcherPresence.expires_at >= now)
    )
    return {int(cid) for ids in lists for cid in ids or []}


def waiting_reasons(session: Session, clusters: Iterable[Cluster]) -> dict[int, str]:
    """For each of ``clusters`` that no running dispatcher serves: why its queued runs do not start."""
    served = served_cluster_ids(session)
    return {
        c.id: f"waiting: no dispatcher serves cluster {c.name!r}"
        + (f" (ray_address {c.ray_address})" if c.ray_address else "")
        for c in clusters
        if c.id not in served
    }
