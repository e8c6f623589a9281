"""Claims and leases: the only SQL the dispatcher issues itself (results go through ingest).

:func:`claim_runs` takes queued runs, :func:`load_claimed` reads what their specs are built from,
:func:`renew_leases` / :func:`write_progress` keep them, :func:`hold_for_finish` / :func:`requeue` end
them, :func:`reap_expired` recovers the runs of dispatchers that died, and :func:`announce` /
:func:`retire` keep the dispatcher's row in ``dispatchers`` (the clusters it serves, see
:func:`served_clusters`).

A claim is one ``UPDATE ... RETURNING`` over ``SELECT ... ORDER BY queue_order LIMIT n``. On
PostgreSQL the select is a CTE taking ``FOR UPDATE SKIP LOCKED``, so concurrent dispatchers never take the
same run and never wait on each other; on SQLite the statement runs under the single writer lock, which
makes it just as atomic. Every later write of a dispatcher is guarded by ``lease_owner = me AND status =
'running'``: once a lease expired and someone else re-queued or took the run, or a user cancelled it,
the stale dispatcher's writes match nothing, which is what makes recording exactly-once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, false, select, update
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import (
    Cluster,
    DispatcherPresence,
    Release,
    Run,
    RunSource,
    RunStatus,
    Variant,
    Workload,
)
from ablate.backend.domain.placement import (
    NodeInfo,
    choose_devices,
    demand_for,
    device_resource,
    unplaceable_reason,
)
from ablate.backend.services import dispatchers
from ablate.workers.dispatch import devices, identity
from ablate.workers.dispatch.execution import excluded_nodes
from ablate.workers.dispatch.spec import RunRows

RUNNING = RunStatus.running.value
QUEUED = RunStatus.queued.value


@dataclass(frozen=True)
class Claimed:
    run_id: int
    attempt: int
    queue_order: int
    # the devices taken for it: per node rank, (Ray node id, device indices); empty for a CPU run
    devices: tuple[tuple[str, tuple[int, ...]], ...] = ()
    fail: str = ""  # claimed only to fail it at once (it waited past ABLATE_WAIT_DEADLINE_S)


def served_clusters(
    session: Session, gcs_address: str, *, joined: str = "", cluster_names: Sequence[str] | None = None
) -> list[int]:
    """The clusters a dispatcher connected to the Ray cluster at ``gcs_address`` serves: those whose
    ``ray_address`` names that cluster however it is written (see :mod:`.identity`), or none (the
    default cluster); only ``cluster_names`` when given."""
    q = select(Cluster.id, Cluster.ray_address)
    if cluster_names:
        q = q.where(Cluster.name.in_(list(cluster_names)))
    rows = [(r.id, r.ray_address) for r in session.execute(q)]
    return identity.served_ids(rows, gcs_address, joined=joined)


def claim_runs(
    session: Session,
    owner: str,
    *,
    limit: int,
    lease_s: float,
    gcs_address: str = "",
    joined: str = "",
    cluster_names: Sequence[str] | None = None,
    now: datetime | None = None,
    nodes: Sequence[NodeInfo] | None = None,
    wait_deadline_s: float = 0.0,
) -> list[Claimed]:
    """Atomically move up to ``limit`` queued runs (lowest ``queue_order`` first) to running for ``owner``:
    runs of the clusters it serves (connected to the Ray cluster at ``gcs_address``, after being told
    to join ``joined``; see :func:`served_clusters`). Given the Ray cluster's ``nodes`` (alive and dead),
    a run on devices is claimed only together with its devices (see :func:`_claim_with_devices`)."""
    if limit <= 0:
        return []
    served = served_clusters(session, gcs_address, joined=joined, cluster_names=cluster_names)
    if not served:
        return []
    now = now or utcnow()
    if nodes is not None and _any_on_devices(session, served):
        return _claim_with_devices(session, owner, served, limit, lease_s, list(nodes), wait_deadline_s, now)
    pick = (
        select(Run.id)
        .where(
            Run.status == QUEUED,
            Run.source == RunSource.scheduled.value,
            Run.cluster_id.in_(served),
        )
        .order_by(Run.queue_order, Run.id)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        # A CTE is evaluated exactly once; PostgreSQL may re-run an ``IN (subquery LIMIT n)`` and
        # then take more than n rows.
        picked = pick.with_for_update(skip_locked=True, of=Run).cte("picked")
        target = Run.id == picked.c.id
    else:
        target = Run.id.in_(pick)
    stmt = (
        update(Run)
        .where(target, Run.status == QUEUED)
        .values(
            status=RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            started_at=now,
            finished_at=None,
            current_step=None,
            total_steps=None,
            latest_throughput=None,
            updated_at=now,
        )
        .returning(Run.id, Run.attempt, Run.queue_order)
        .execution_options(synchronize_session=False)
    )
    rows = session.execute(stmt).all()
    return sorted(
        (Claimed(r.id, r.attempt, r.queue_order) for r in rows), key=lambda c: (c.queue_order, c.run_id)
    )


WAITING_FOR_RAY = "waiting for Ray: "


def note_waiting_for_ray(session: Session, served: Sequence[int], reason: str) -> int:
    """Say on every queued run of ``served`` that it waits for the dispatcher's Ray to come back (its
    own waiting reason, if it had one, is written again at the next claim); returns how many."""
    if not served:
        return 0
    text = f"{WAITING_FOR_RAY}{reason}; the dispatcher reconnects with backoff"[:1000]
    result = session.execute(
        update(Run)
        .where(
            Run.status == QUEUED, Run.source == RunSource.scheduled.value, Run.cluster_id.in_(list(served))
        )
        .values(error=text)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def clear_waiting_for_ray(session: Session, served: Sequence[int]) -> None:
    """Ray is back: the queued runs of ``served`` no longer wait for it."""
    session.execute(
        update(Run)
        .where(
            Run.status == QUEUED,
            Run.cluster_id.in_(list(served)),
            Run.error.startswith(WAITING_FOR_RAY, autoescape=True),
        )
        .values(error=None)
        .execution_options(synchronize_session=False)
    )


def _any_on_devices(session: Session, served: list[int]) -> bool:
    """Whether any served cluster runs on devices (else the plain claim, one statement, is enough)."""
    rows = session.execute(
        select(Cluster.accelerator, Cluster.resource_name, Cluster.devices_per_node, Cluster.name).where(
            Cluster.id.in_(served)
        )
    ).all()
    for r in rows:
        try:
            demand = demand_for(r._asdict())
        except ValueError:
            continue
        if device_resource(demand) is not None:
            return True
    return False


CANDIDATES = 256  # queued runs looked at per claim: enough to find work behind waiting pools


def _claim_with_devices(
    session: Session,
    owner: str,
    served: list[int],
    limit: int,
    lease_s: float,
    nodes: list[NodeInfo],
    wait_deadline_s: float,
    now: datetime,
) -> list[Claimed]:
    """The claim when devices are handed out: walk the queue in order; a CPU run is claimed as before, a
    run on devices only once free devices on enough alive nodes of its pool are taken for it (in this
    transaction). A run that cannot get them stays queued and says why in ``error`` (what it waits for,
    which runs hold it); runs behind it, of other pools or fitting elsewhere, go on. A run the Ray cluster
    could never hold (even with its dead nodes back) is claimed to fail at once; one that waited
    ``wait_deadline_s`` with no live run holding what it needs is claimed to fail naming why."""
    pick = (
        select(
            Run.id, Run.attempt, Run.queue_order, Run.cluster_id, Run.provenance, Run.error, Run.waiting_since
        )
        .where(Run.status == QUEUED, Run.source == RunSource.scheduled.value, Run.cluster_id.in_(served))
        .order_by(Run.queue_order, Run.id)
        .limit(max(CANDIDATES, limit))
    )
    if session.get_bind().dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True, of=Run)
    else:  # SQLite: take the single writer lock before reading, so the reads below stay true until commit
        session.execute(update(Run).where(false()).values(id=Run.id))
    candidates = session.execute(pick).all()
    if not candidates:
        return []
    clusters = _rows_by_id(session, Cluster, {c.cluster_id for c in candidates})
    alive = [n for n in nodes if n.alive]
    known = [NodeInfo(n.node_id, n.address, True, n.resources, n.labels) for n in nodes]
    addresses = {n.node_id: n.address for n in nodes}
    holdings = devices.held(session, now)
    taken: dict[tuple[str, str], set[int]] = {}
    for h in holdings:
        taken.setdefault((h.node_id, h.resource), set()).add(h.device_index)
    picked: list[Claimed] = []
    for cand in candidates:
        if len(picked) >= limit:
            break
        try:
            demand = demand_for(clusters[cand.cluster_id])
        except ValueError:  # a bad cluster row: the spec builder names it when the run is executed
            demand = None
        wanted = device_resource(demand) if demand is not None else None
        if demand is None or wanted is None:
            picked.append(Claimed(cand.id, cand.attempt, cand.queue_order))
            continue
        excluded = excluded_nodes(cand.provenance)
        usable = [n for n in known if n.node_id not in excluded]
        if unplaceable_reason(demand, usable):  # never: the watcher fails it, naming what is missing
            picked.append(Claimed(cand.id, cand.attempt, cand.queue_order))
            continue
        resource = wanted[0]
        held_here = {node: got for (node, res), got in taken.items() if res == resource}
        choice = choose_devices(demand, alive, held_here, list(excluded))
        if choice.nodes and devices.take(
            session,
            owner=owner,
            run_id=cand.id,
            attempt=cand.attempt,
            cluster_id=cand.cluster_id,
            resource=resource,
            nodes=choice.nodes,
            addresses=addresses,
            lease_s=lease_s,
            now=now,
        ):
            for node_id, indices in choice.nodes:
                taken.setdefault((node_id, resource), set()).update(indices)
                holdings += [devices.Held(node_id, resource, i, cand.id, cand.attempt, True) for i in indices]
            got = tuple((node_id, tuple(indices)) for node_id, indices in choice.nodes)
            picked.append(Claimed(cand.id, cand.attempt, cand.queue_order, got))
            continue
        short = choice.short or "another dispatcher took them first"
        reason, live = _waiting_reason(demand, resource, nodes, holdings, short, excluded)
        since = None if live else (cand.waiting_since or now)
        if since is not None and wait_deadline_s > 0 and (now - since).total_seconds() > wait_deadline_s:
            fail = (
                f"waited {wait_deadline_s:g} s (ABLATE_WAIT_DEADLINE_S) with nothing progressing: "
                f"{reason.removeprefix('waiting ')}"
            )
            picked.append(Claimed(cand.id, cand.attempt, cand.queue_order, fail=fail))
            continue
        if reason != cand.error or since != cand.waiting_since:
            session.execute(
                update(Run)
                .where(Run.id == cand.id, Run.status == QUEUED)
                .values(error=reason, waiting_since=since)
                .execution_options(synchronize_session=False)
            )
    if not picked:
        return []
    claimed = session.execute(
        update(Run)
        .where(Run.id.in_([c.run_id for c in picked]), Run.status == QUEUED)
        .values(
            status=RUNNING,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_s),
            started_at=now,
            finished_at=None,
            current_step=None,
            total_steps=None,
            latest_throughput=None,
            waiting_since=None,
            updated_at=now,
        )
        .returning(Run.id)
        .execution_options(synchronize_session=False)
    ).scalars()
    ok = set(claimed)
    for lost in [c for c in picked if c.run_id not in ok and c.devices]:  # cancelled meanwhile
        for node_id, _ in lost.devices:
            devices.release(session, lost.run_id, lost.attempt, node_id)
    return sorted((c for c in picked if c.run_id in ok), key=lambda c: (c.queue_order, c.run_id))


def _waiting_reason(
    demand: Any,
    resource: str,
    nodes: list[NodeInfo],
    holdings: list[devices.Held],
    short: str,
    excluded: dict[str, str],
) -> tuple[str, bool]:
    """Why a run waits for devices, naming the runs that hold its pool, and whether any of them is live
    (a live holder will end and free them: that is progress, so no deadline runs meanwhile)."""
    from ablate.backend.domain.placement import node_in_pool

    pool_nodes = {n.node_id for n in nodes if node_in_pool(n, demand) and n.node_id not in excluded}
    down = sum(1 for n in nodes if n.node_id in pool_nodes and not n.alive)
    mine = [h for h in holdings if h.node_id in pool_nodes and h.resource == resource]
    live_runs = sorted({h.run_id for h in mine if h.live})
    stopping = sorted({h.run_id for h in mine if not h.live} - set(live_runs))
    pool = ",".join(demand.labels.values()) or demand.cluster_name or resource
    text = f"waiting for {demand.nodes} node(s) of pool {pool} ({short})"
    held_by = []
    if live_runs:
        held_by.append("held by run(s) " + ", ".join(map(str, live_runs)))
    if stopping:
        names = ", ".join(map(str, stopping))
        held_by.append(f"held by stopped run(s) {names} until their processes are confirmed gone")
    if down:
        held_by.append(f"{down} pool node(s) not alive")
    if held_by:
        text += ": " + "; ".join(held_by)
    return text, bool(live_runs)


def _columns(obj: Any, exclude: tuple[str, ...] = ("id", "created_at")) -> dict[str, Any]:
    return {c.key: getattr(obj, c.key) for c in obj.__table__.columns if c.key not in exclude}


def load_claimed(session: Session, claimed: Sequence[Claimed]) -> tuple[list[RunRows], set[int]]:
    """The rows of claimed runs (in claim order) as plain values for the spec builder, and the studies
    they belong to: one query for the runs' own columns, then one per table for the distinct rows they
    name (a batch of 64 runs names a handful of variants; a join would repeat and map each per run)."""
    if not claimed:
        return [], set()
    runs = session.execute(
        select(
            Run.id,
            Run.attempt,
            Run.study_id,
            Run.provenance,
            Run.workload_id,
            Run.variant_id,
            Run.cluster_id,
            Run.release_id,
        ).where(Run.id.in_([c.run_id for c in claimed]))
    ).all()
    by_id = {r.id: r for r in runs}
    workloads = _rows_by_id(session, Workload, {r.workload_id for r in runs})
    variants = _rows_by_id(session, Variant, {r.variant_id for r in runs})
    clusters = _rows_by_id(session, Cluster, {r.cluster_id for r in runs})
    releases = _rows_by_id(session, Release, {r.release_id for r in runs})
    refs = {i: f"{v['image']}:{v['tag']}" for i, v in releases.items()}
    rows = [
        RunRows(
            run_id=run.id,
            attempt=run.attempt,
            release_ref=refs[run.release_id],
            workload=dict(workloads[run.workload_id]),
            variant=dict(variants[run.variant_id]),
            cluster=dict(clusters[run.cluster_id]),
            release=dict(releases[run.release_id]),
            excluded_nodes=excluded_nodes(run.provenance),
        )
        for run in (by_id[c.run_id] for c in claimed)
    ]
    return rows, {r.study_id for r in runs if r.study_id is not None}


def _rows_by_id(session: Session, model: Any, ids: set[int]) -> dict[int, dict[str, Any]]:
    """The rows of ``model`` with these ids, as their column values (see :func:`_columns`)."""
    return {obj.id: _columns(obj) for obj in session.scalars(select(model).where(model.id.in_(ids)))}


def _mine(owner: str) -> ColumnElement[bool]:
    return and_(Run.lease_owner == owner, Run.status == RUNNING)


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
        .where(Run.id.in_(ids), _mine(owner))
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
    res = session.execute(
        update(Run)
        .where(Run.id == run_id, _mine(owner))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    # Session.execute is typed as returning Result for any statement (no overload for DML); an UPDATE's
    # result is a CursorResult, which has rowcount.
    return bool(res.rowcount)  # type: ignore[attr-defined]


def hold_for_finish(
    session: Session, owner: str, run_ids: Sequence[int], *, lease_s: float, now: datetime | None = None
) -> dict[int, Run]:
    """Lock runs for recording their results: the guarded UPDATE takes the row locks (PostgreSQL) or
    the write lock (SQLite) first, so a concurrent cancel or reaper waits for us or wins outright.
    Returns the runs still held, loaded by the same statement (``RETURNING``); an id missing was
    cancelled or taken over."""
    ids = list(run_ids)
    if not ids:
        return {}
    now = now or utcnow()
    stmt = (
        update(Run)
        .where(Run.id.in_(ids), _mine(owner))
        .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
        .returning(Run)
        .execution_options(synchronize_session=False, populate_existing=True)
    )
    return {r.id: r for r in session.scalars(stmt)}


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
    res = session.execute(
        update(Run)
        .where(Run.id == run_id, _mine(owner))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    # Session.execute is typed as returning Result for any statement (no overload for DML); an UPDATE's
    # result is a CursorResult, which has rowcount.
    return bool(res.rowcount)  # type: ignore[attr-defined]


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
