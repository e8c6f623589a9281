"""Claims: the SQL that takes queued runs for a dispatcher (keeping and ending them: :mod:`.leases`).

:func:`claim_runs` takes queued runs of the clusters a dispatcher serves (see :func:`served_clusters`),
:func:`.claimed.load_claimed` reads what their specs are built from, and :func:`note_waiting_for_ray` /
:func:`clear_waiting_for_ray` tell the queued runs when the dispatcher's Ray is gone and back.

A claim is one ``UPDATE ... RETURNING`` over ``SELECT ... ORDER BY queue_order LIMIT n``. On
PostgreSQL the select is a CTE taking ``FOR UPDATE SKIP LOCKED``, so concurrent dispatchers never take the
same run and never wait on each other; on SQLite the statement runs under the single writer lock, which
makes it just as atomic. Every later write of a dispatcher is guarded by its lease (see :mod:`.leases`),
which is what makes recording exactly-once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, false, select, update
from sqlalchemy.orm import Session

from ablate.backend.db.base import picked_rows, utcnow
from ablate.backend.db.models import Cluster, Run, RunSource, RunStatus, Study
from ablate.backend.domain.placement import (
    NodeInfo,
    choose_devices,
    demand_for,
    device_resource,
    excluded_nodes,
    unplaceable_reason,
)
from ablate.workers.dispatch import devices, identity
from ablate.workers.dispatch.claimed import Claimed, RunNames, rows_by_id

RUNNING = RunStatus.running.value
QUEUED = RunStatus.queued.value


# What a claim returns of each run: its place, and what :func:`load_claimed` builds its spec from.
_STUDY_STATUS = select(Study.status).where(Study.id == Run.study_id).scalar_subquery().label("study_status")
_RETURNED = (
    Run.id,
    Run.attempt,
    Run.queue_order,
    Run.workload_id,
    Run.variant_id,
    Run.cluster_id,
    Run.release_id,
    Run.study_id,
    _STUDY_STATUS,
    Run.provenance,
)


def _names(row: Row[Any]) -> RunNames:
    """A claimed run's :class:`RunNames` from a row of :data:`_RETURNED`."""
    return RunNames(
        row.workload_id,
        row.variant_id,
        row.cluster_id,
        row.release_id,
        row.study_id,
        row.study_status,
        row.provenance or {},
    )


@dataclass(frozen=True)
class Serving:
    """What a dispatcher serves (see :func:`served_clusters`): the clusters of the Ray cluster at
    ``gcs_address``, which it was told to join as ``joined``; only ``cluster_names`` when given."""

    gcs_address: str = ""
    joined: str = ""
    cluster_names: Sequence[str] | None = None


@dataclass(frozen=True)
class DeviceClaiming:
    """What a claim of runs on devices goes by: the Ray cluster's ``nodes`` as Ray reports them (alive
    and dead), and how long a run may wait with nothing progressing (``ABLATE_WAIT_DEADLINE_S``; 0:
    forever)."""

    nodes: Sequence[NodeInfo]
    wait_deadline_s: float = 0.0


@dataclass(frozen=True)
class _Claim:
    """One claim: who takes runs, how many at most, for how long a lease, and when."""

    owner: str
    limit: int
    lease_s: float
    now: datetime

    def running_values(self, **extra: Any) -> dict[str, Any]:
        """The columns a claimed run gets (``extra`` before ``updated_at``)."""
        return {
            "status": RUNNING,
            "lease_owner": self.owner,
            "lease_expires_at": self.now + timedelta(seconds=self.lease_s),
            "started_at": self.now,
            "finished_at": None,
            "current_step": None,
            "total_steps": None,
            "latest_throughput": None,
            **extra,
            "updated_at": self.now,
        }


def served_clusters(
    session: Session, gcs_address: str, *, joined: str = "", cluster_names: Sequence[str] | None = None
) -> list[int]:
    """The clusters a dispatcher connected to the Ray cluster at ``gcs_address`` serves: those whose
    ``ray_address`` names that cluster however it is written (see :mod:`.identity`), or none (the
    default cluster); only ``cluster_names`` when given."""
    return [r["id"] for r in _served_rows(session, gcs_address, joined=joined, cluster_names=cluster_names)]


def _served_rows(
    session: Session, gcs_address: str, *, joined: str = "", cluster_names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The served clusters' rows (see :func:`served_clusters`), with what a claim reads of their demand."""
    q = select(
        Cluster.id,
        Cluster.ray_address,
        Cluster.accelerator,
        Cluster.resource_name,
        Cluster.devices_per_node,
        Cluster.name,
    )
    if cluster_names:
        q = q.where(Cluster.name.in_(list(cluster_names)))
    rows = {r.id: r._asdict() for r in session.execute(q)}
    pairs = [(i, r["ray_address"]) for i, r in rows.items()]
    return [rows[i] for i in identity.served_ids(pairs, gcs_address, joined=joined)]


def claim_runs(
    session: Session,
    owner: str,
    *,
    limit: int,
    lease_s: float,
    serving: Serving | None = None,
    device_claiming: DeviceClaiming | None = None,
    now: datetime | None = None,
) -> list[Claimed]:
    """Atomically move up to ``limit`` queued runs (lowest ``queue_order`` first) to running for ``owner``:
    runs of the clusters it serves (see :class:`Serving`; none given: the default cluster's). Given
    ``device_claiming`` (the Ray cluster's nodes, alive and dead), a run on devices is claimed only
    together with its devices (see :func:`_claim_with_devices`)."""
    if limit <= 0:
        return []
    serving = serving or Serving()
    rows = _served_rows(
        session, serving.gcs_address, joined=serving.joined, cluster_names=serving.cluster_names
    )
    served = [r["id"] for r in rows]
    if not served:
        return []
    claim = _Claim(owner, limit, lease_s, now or utcnow())
    if device_claiming is not None and _any_on_devices(rows):
        return _claim_with_devices(session, claim, served, device_claiming)
    return _claim_queued(session, claim, served)


def _claim_queued(session: Session, claim: _Claim, served: list[int]) -> list[Claimed]:
    """The plain claim (no run on devices): one statement."""
    pick = (
        select(Run.id)
        .where(
            Run.status == QUEUED,
            Run.source == RunSource.scheduled.value,
            Run.cluster_id.in_(served),
        )
        .order_by(Run.queue_order, Run.id)
        .limit(claim.limit)
    )
    stmt = (
        update(Run)
        .where(picked_rows(session, pick, Run.id), Run.status == QUEUED)
        .values(**claim.running_values())
        .returning(*_RETURNED)
        .execution_options(synchronize_session=False)
    )
    rows = session.execute(stmt).all()
    return sorted(
        (Claimed(r.id, r.attempt, r.queue_order, names=_names(r)) for r in rows),
        key=lambda c: (c.queue_order, c.run_id),
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


def _any_on_devices(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any served cluster (its row) runs on devices (else the plain claim, one statement, is
    enough)."""
    for r in rows:
        try:
            demand = demand_for({k: v for k, v in r.items() if k not in ("id", "ray_address")})
        except ValueError:
            continue
        if device_resource(demand) is not None:
            return True
    return False


CANDIDATES = 256  # queued runs looked at per claim: enough to find work behind waiting pools


@dataclass
class _DeviceBook:
    """The devices as one claim sees them: the Ray cluster's nodes, and what is held (growing as the
    claim takes devices)."""

    nodes: list[NodeInfo]  # alive and dead
    alive: list[NodeInfo]
    known: list[NodeInfo]  # every node as if alive: what the Ray cluster could hold with its dead back
    addresses: dict[str, str]  # node id -> address
    holdings: list[devices.Held]
    taken: dict[tuple[str, str], set[int]]  # (node id, resource) -> device indices held

    @classmethod
    def read(cls, session: Session, nodes: list[NodeInfo], now: datetime) -> _DeviceBook:
        alive = [n for n in nodes if n.alive]
        known = [NodeInfo(n.node_id, n.address, True, n.resources, n.labels) for n in nodes]
        addresses = {n.node_id: n.address for n in nodes}
        holdings = devices.held(session, now)
        taken: dict[tuple[str, str], set[int]] = {}
        for h in holdings:
            taken.setdefault((h.node_id, h.resource), set()).add(h.device_index)
        return cls(nodes, alive, known, addresses, holdings, taken)

    def held_of(self, resource: str) -> dict[str, set[int]]:
        """Node id -> the indices of ``resource`` held there."""
        return {node: got for (node, res), got in self.taken.items() if res == resource}

    def add(
        self, run_id: int, attempt: int, resource: str, chosen: Sequence[tuple[str, Sequence[int]]]
    ) -> None:
        """This claim took ``chosen`` (per node rank, node id and indices) for the attempt."""
        for node_id, indices in chosen:
            self.taken.setdefault((node_id, resource), set()).update(indices)
            self.holdings += [devices.Held(node_id, resource, i, run_id, attempt, True) for i in indices]


def _claim_with_devices(
    session: Session, claim: _Claim, served: list[int], device_claiming: DeviceClaiming
) -> list[Claimed]:
    """The claim when devices are handed out: walk the queue in order; a CPU run is claimed as before, a
    run on devices only once free devices on enough alive nodes of its pool are taken for it (in this
    transaction). A run that cannot get them stays queued and says why in ``error`` (what it waits for,
    which runs hold it); runs behind it, of other pools or fitting elsewhere, go on. A run the Ray cluster
    could never hold (even with its dead nodes back) is claimed to fail at once; one that waited
    ``wait_deadline_s`` with no live run holding what it needs is claimed to fail naming why."""
    candidates = _lock_candidates(session, served, claim.limit)
    if not candidates:
        return []
    clusters = rows_by_id(session, Cluster, {c.cluster_id for c in candidates})
    book = _DeviceBook.read(session, list(device_claiming.nodes), claim.now)
    picked: list[Claimed] = []
    for cand in candidates:
        if len(picked) >= claim.limit:
            break
        got = _claim_candidate(session, claim, cand, clusters, book, device_claiming.wait_deadline_s)
        if got is not None:
            picked.append(got)
    if not picked:
        return []
    return _mark_running(session, claim, picked)


def _lock_candidates(session: Session, served: list[int], limit: int) -> Sequence[Row[Any]]:
    """The queued runs a claim looks at, in queue order, locked until the claim commits (PostgreSQL: the
    rows, skipping those another dispatcher looks at; SQLite: the single writer lock, taken first)."""
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
    return session.execute(pick).all()


def _claim_candidate(
    session: Session,
    claim: _Claim,
    cand: Row[Any],
    clusters: dict[int, dict[str, Any]],
    book: _DeviceBook,
    wait_deadline_s: float,
) -> Claimed | None:
    """One queued run of the walk: claimed (with its devices, taken now), or None: it waits."""
    try:
        demand = demand_for(clusters[cand.cluster_id])
    except ValueError:  # a bad cluster row: the spec builder names it when the run is executed
        demand = None
    wanted = device_resource(demand) if demand is not None else None
    if demand is None or wanted is None:
        return Claimed(cand.id, cand.attempt, cand.queue_order)
    excluded = excluded_nodes(cand.provenance)
    usable = [n for n in book.known if n.node_id not in excluded]
    if unplaceable_reason(demand, usable):  # never: the watcher fails it, naming what is missing
        return Claimed(cand.id, cand.attempt, cand.queue_order)
    resource = wanted[0]
    choice = choose_devices(demand, book.alive, book.held_of(resource), list(excluded))
    allocation = devices.Allocation(cand.id, cand.attempt, cand.cluster_id, resource, choice.nodes)
    if choice.nodes and devices.take(
        session, allocation, owner=claim.owner, addresses=book.addresses, lease_s=claim.lease_s, now=claim.now
    ):
        book.add(cand.id, cand.attempt, resource, choice.nodes)
        got = tuple((node_id, tuple(indices)) for node_id, indices in choice.nodes)
        return Claimed(cand.id, cand.attempt, cand.queue_order, got)
    short = choice.short or "another dispatcher took them first"
    reason, live = _waiting_reason(demand, resource, book.nodes, book.holdings, short, excluded)
    return _wait_or_fail(session, cand, reason, live, claim.now, wait_deadline_s)


def _wait_or_fail(
    session: Session, cand: Row[Any], reason: str, live: bool, now: datetime, wait_deadline_s: float
) -> Claimed | None:
    """A run that could not get its devices: claimed to fail once it waited ``wait_deadline_s`` with no
    ``live`` run holding what it needs; else it stays queued, saying why (written only when that
    changed)."""
    since = None if live else (cand.waiting_since or now)
    if since is not None and wait_deadline_s > 0 and (now - since).total_seconds() > wait_deadline_s:
        fail = (
            f"waited {wait_deadline_s:g} s (ABLATE_WAIT_DEADLINE_S) with nothing progressing: "
            f"{reason.removeprefix('waiting ')}"
        )
        return Claimed(cand.id, cand.attempt, cand.queue_order, fail=fail)
    if reason != cand.error or since != cand.waiting_since:
        session.execute(
            update(Run)
            .where(Run.id == cand.id, Run.status == QUEUED)
            .values(error=reason, waiting_since=since)
            .execution_options(synchronize_session=False)
        )
    return None


def _mark_running(session: Session, claim: _Claim, picked: list[Claimed]) -> list[Claimed]:
    """Move the runs the walk picked to running; those cancelled meanwhile give their devices back."""
    claimed = session.execute(
        update(Run)
        .where(Run.id.in_([c.run_id for c in picked]), Run.status == QUEUED)
        .values(**claim.running_values(waiting_since=None))
        .returning(*_RETURNED)
        .execution_options(synchronize_session=False)
    )
    ok = {r.id: _names(r) for r in claimed}
    for lost in [c for c in picked if c.run_id not in ok and c.devices]:  # cancelled meanwhile
        for node_id, _ in lost.devices:
            devices.release(session, lost.run_id, lost.attempt, node_id)
    return sorted(
        (replace(c, names=ok[c.run_id]) for c in picked if c.run_id in ok),
        key=lambda c: (c.queue_order, c.run_id),
    )


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
