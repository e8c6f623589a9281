"""Which clusters running dispatchers serve, from what they announce (the ``dispatchers`` table): a
queued run of a cluster that no running dispatcher serves waits for nothing, and says so, with when a
dispatcher last served that cluster (a stopped dispatcher's row stays, expired, for
``PRESENCE_KEPT`` after it was last seen; see ``ablate.workers.dispatch.claims``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import Cluster, DispatcherPresence

# How long the row of a dispatcher that stopped (or died) is kept, so "last seen" can be told.
PRESENCE_KEPT = timedelta(hours=24)


def served_cluster_ids(session: Session, now: datetime | None = None) -> set[int]:
    """The clusters some running dispatcher (its announcement not expired) serves."""
    now = now or utcnow()
    lists = session.scalars(
        select(DispatcherPresence.served_cluster_ids).where(DispatcherPresence.expires_at > now)
    )
    return {int(cid) for ids in lists for cid in ids or []}


def last_seen(session: Session, now: datetime | None = None) -> dict[int, datetime]:
    """For each cluster some dispatcher served within ``PRESENCE_KEPT``: when one last said so."""
    now = now or utcnow()
    rows = session.execute(
        select(DispatcherPresence.served_cluster_ids, DispatcherPresence.heartbeat_at).where(
            DispatcherPresence.heartbeat_at >= now - PRESENCE_KEPT
        )
    )
    seen: dict[int, datetime] = {}
    for ids, at in rows:
        for cid in ids or []:
            if int(cid) not in seen or at > seen[int(cid)]:
                seen[int(cid)] = at
    return seen


def ago(then: datetime, now: datetime) -> str:
    """``then`` as a short age: "40 s ago", "12 min ago", "3 h 5 min ago"."""
    s = max(0, int((now - then).total_seconds()))
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    return f"{s // 3600} h {s % 3600 // 60} min ago"


def waiting_reasons(
    session: Session, clusters: Iterable[Cluster], now: datetime | None = None
) -> dict[int, str]:
    """For each of ``clusters`` that no running dispatcher serves: why its queued runs do not start, and
    when a dispatcher last served it, e.g. "waiting: no dispatcher serves cluster 'gpu-1x8' (last seen
    12 min ago)"."""
    now = now or utcnow()
    served = served_cluster_ids(session, now)
    missing = [c for c in clusters if c.id not in served]
    if not missing:
        return {}
    seen = last_seen(session, now)
    hours = int(PRESENCE_KEPT.total_seconds() // 3600)
    out = {}
    for c in missing:
        when = f"last seen {ago(seen[c.id], now)}" if c.id in seen else f"none seen in the last {hours} h"
        where = f"ray_address {c.ray_address}; " if c.ray_address else ""
        out[c.id] = f"waiting: no dispatcher serves cluster {c.name!r} ({where}{when})"
    return out
