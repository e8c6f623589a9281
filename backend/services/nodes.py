"""Ray nodes that runs were kept off: a node that died or failed preflight in one attempt is excluded
from that run's next attempts (recorded in the run's provenance as ``excluded_node.<node id>``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ablate.backend.db.models import Run
from ablate.backend.domain.placement import EXCLUDED_NODE_PREFIX as EXCLUDED_PREFIX

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
        for key, why in (provenance or {}).items():
            node = key.removeprefix(EXCLUDED_PREFIX)
            if (
                key.startswith(EXCLUDED_PREFIX)
                and str(why).startswith("failed preflight")
                and node not in seen
            ):
                seen[node] = ExcludedNode(node, str(why), run_id)
    return list(seen.values())
