"""The clusters page: each cluster, its accelerator, and what Ray offers for it right now.

A page request never starts or joins Ray. If this process is already connected (the dispatcher runs
in it), the live resources of the nodes in each cluster's pool are shown; otherwise the page says so
and shows the demand the cluster is configured with.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ablate.backend.db.models import Cluster
from ablate.backend.domain.placement import NodeDemand, NodeInfo, demand_for, node_in_pool
from ablate.backend.schemas.catalog import ClusterOut
from ablate.backend.services import catalog
from ablate.backend.services import nodes as nodes_service
from ablate.backend.services.nodes import ExcludedNode, HeldDevices

# Resources worth showing; Ray also reports object-store memory, node:IP markers and the like.
_SHOWN_PREFIXES = ("CPU", "GPU", "PPU", "memory", "accelerator_type")


@dataclass
class PoolResources:
    nodes: int
    total: dict[str, float]
    available: dict[str, float] | None  # None: this Ray does not report free resources per node


@dataclass
class ClusterView:
    # The definition as the API shows it (resource_name None: the accelerator's default).
    definition: ClusterOut
    # The Ray resource that reaches its devices: the definition's resource_name, else the accelerator's
    # default (GPU, PPU); None on a CPU cluster.
    device_resource: str | None = None
    pool: PoolResources | None = None
    failed_preflight: list[ExcludedNode] = field(default_factory=list)  # nodes runs were kept off


@dataclass
class ClustersPage:
    clusters: list[ClusterView]
    ray_connected: bool
    ray_totals: dict[str, float] = field(default_factory=dict)
    ray_available: dict[str, float] = field(default_factory=dict)
    held: list[HeldDevices] = field(default_factory=list)  # devices runs hold now, per node


def _ray_module() -> Any | None:
    """The ray module if this process imported and initialised it; importing it here would cost seconds."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return None
    return ray


def _shown(resources: dict[str, float], resource_name: str | None) -> dict[str, float]:
    """The resources worth showing; Ray reports memory in bytes, shown here as "memory_gib"."""
    keep: dict[str, float] = {}
    for k, v in resources.items():
        if k == "memory":
            keep["memory_gib"] = v / 2**30
        elif k.startswith(_SHOWN_PREFIXES) or k == resource_name:
            keep[k] = v
    return dict(sorted(keep.items()))


def _demand(cluster: Cluster) -> NodeDemand:
    """The dispatcher's own translation of the definition (defaults included) into Ray's demand."""
    return demand_for(
        {
            "name": cluster.name,
            "accelerator": cluster.accelerator,
            "nodes": cluster.nodes,
            "devices_per_node": cluster.devices_per_node,
            "labels": cluster.labels,
            "resource_name": cluster.resource_name,
        }
    )


def device_resource(cluster: Cluster) -> str | None:
    """The Ray resource a run of this cluster reserves its devices with (a GPU or PPU cluster defined
    without ``resource_name`` uses its accelerator's default); None on a CPU cluster."""
    try:
        demand = _demand(cluster)
    except ValueError:  # a device cluster without devices: nothing a run could reserve
        return None
    if demand.gpus:
        return "GPU"
    return next(iter(demand.custom), None)


def _node_matches(node: dict[str, Any], cluster: Cluster) -> bool:
    """The dispatcher's own rule (label selectors, the pool's device resource), so the page shows
    exactly the nodes a run of this cluster could be placed on."""
    return node_in_pool(NodeInfo.from_ray(node), _demand(cluster))


def _available_per_node(ray: Any) -> dict[str, dict[str, float]] | None:
    """Node id -> free resources; None when this Ray version does not say (never guess zeros)."""
    # Ray has no public per-node "available" call; its state module has one whose home may move.
    try:
        from ray._private import state

        return dict(state.available_resources_per_node())
    except Exception:
        return None


def _pool(cluster: Cluster, nodes: list[dict[str, Any]], per_node: dict[str, Any] | None) -> PoolResources:
    alive = [n for n in nodes if n.get("Alive") and _node_matches(n, cluster)]
    total: dict[str, float] = {}
    available: dict[str, float] = {}
    for node in alive:
        for k, v in (node.get("Resources") or {}).items():
            total[k] = total.get(k, 0.0) + float(v)
        for k, v in ((per_node or {}).get(node.get("NodeID", ""), {}) or {}).items():
            available[k] = available.get(k, 0.0) + float(v)
    return PoolResources(
        nodes=len(alive),
        total=_shown(total, device_resource(cluster)),
        available=_shown(available, device_resource(cluster)) if per_node is not None else None,
    )


def clusters_page(session: Session) -> ClustersPage:
    clusters = catalog.list_named(session, Cluster)
    ray = _ray_module()
    views = [
        ClusterView(
            definition=ClusterOut.model_validate(c),
            device_resource=device_resource(c),
            failed_preflight=nodes_service.failed_preflight_nodes(session, c.id),
        )
        for c in clusters
    ]
    held = nodes_service.held_devices(session)
    if ray is None:
        return ClustersPage(clusters=views, ray_connected=False, held=held)
    nodes = list(ray.nodes())
    per_node = _available_per_node(ray)
    for view, cluster in zip(views, clusters, strict=True):
        view.pool = _pool(cluster, nodes, per_node)
    return ClustersPage(
        clusters=views,
        ray_connected=True,
        ray_totals=_shown(dict(ray.cluster_resources()), None),
        ray_available=_shown(dict(ray.available_resources()), None),
        held=held,
    )
