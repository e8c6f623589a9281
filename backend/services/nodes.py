"""Ray nodes as the database knows them: the nodes runs were kept off (a node that died or failed
preflight in one attempt is excluded from that run's next attempts, recorded in the run's provenance as
``excluded_node.<node id>``), and the devices runs hold on each node (``device_allocations``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.base import utcnow
from ablate.backend.db.models import DeviceAllocation, Run
from ablate.backend.domain.placement import excluded_nodes

RECENT_RUNS = 200  # the clusters page looks at this many latest runs per cluster


@dataclass(frozen=True)
class ExcludedNode:
    node_id: str
    reason: str
    run_id: int


def failed_preflight_nodes(
    session: Session, cluster_id: int, *, recent: int = RECENT_RUNS
) -> list[ExcludedNode]:
    """The nodes the latest runs of a cluster excluded after a failed preflight, newest first, each once."""
    rows = session.execute(
        select(Run.id, Run.provenance)
        .where(Run.cluster_id == cluster_id)
        .order_by(Run.id.desc())
        .limit(recent)
    ).all()
    seen: dict[str, ExcludedNode] = {}
    for run_id, provenance in rows:
        for node, why in excluded_nodes(provenance).items():
            if why.startswith("failed preflight") and node not in seen:
                seen[node] = ExcludedNode(node, why, run_id)
    return list(seen.values())


@dataclass(frozen=True)
class HeldDevices:
    """The devices one attempt of a run holds on one node."""

    node_id: str
    node_address: str
    resource: str
    indices: list[int]
    run_id: int
    attempt: int
    live: bool  # False: the attempt was stopped or lost; freed once its processes are confirmed gone


def held_devices(session: Session) -> list[HeldDevices]:
    """Every device held now, grouped by node and attempt, by node then run."""
    now = utcnow()
    groups: dict[tuple[str, str, int, int], HeldDevices] = {}
    rows = session.execute(
        select(DeviceAllocation).order_by(
            DeviceAllocation.node_id, DeviceAllocation.run_id, DeviceAllocation.device_index
        )
    ).scalars()
    for row in rows:
        key = (row.node_id, row.resource, row.run_id, row.attempt)
        if key not in groups:
            groups[key] = HeldDevices(
                row.node_id, row.node_address, row.resource, [], row.run_id, row.attempt,
                row.lease_expires_at >= now,
            )  # fmt: skip
        groups[key].indices.append(row.device_index)
    return list(groups.values())
