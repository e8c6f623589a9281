"""What a run asks of Ray, and whether the Ray cluster can ever give it (pure functions, no Ray import).

A cluster row says how many nodes and devices per node a run needs, which Ray resource reaches the
devices (``GPU``, a custom ``PPU``, or none for CPU) and which node labels select the pool. From that we
derive one *node demand* (the resources of one node's share of the run) and compare it against the
alive nodes of the Ray cluster before submitting, so an impossible run fails in milliseconds with a
message naming what is missing instead of sitting in Ray's queue forever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Ray labels a GPU node with its accelerator type under this key (the current idiom, replacing the
# ``accelerator_type:X`` pseudo-resource).
ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"
# Resources every node has that say nothing about a pool.
_IGNORED = re.compile(r"^(node:.*|memory|object_store_memory|bundle_group.*|.*_group_[0-9a-f]+)$")


# A run's provenance key naming a Ray node its later attempts avoid (it died or failed preflight).
EXCLUDED_NODE_PREFIX = "excluded_node."


def excluded_nodes(provenance: Mapping[str, Any] | None) -> dict[str, str]:
    """The nodes a run's earlier attempts excluded (node id -> why), read from its provenance."""
    return {
        k.removeprefix(EXCLUDED_NODE_PREFIX): str(v)
        for k, v in (provenance or {}).items()
        if k.startswith(EXCLUDED_NODE_PREFIX)
    }


def excluded_node_entries(excluded: Mapping[str, str]) -> dict[str, str]:
    """The provenance entries that record ``excluded`` (node id -> why): what :func:`excluded_nodes` reads."""
    return {f"{EXCLUDED_NODE_PREFIX}{node}": why for node, why in excluded.items()}


@dataclass(frozen=True)
class NodeDemand:
    """One node's share of a run: what its Ray task (or placement-group bundle) reserves."""

    nodes: int
    ranks_per_node: int
    cpus: float
    gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    accelerator: str = "cpu"
    cluster_name: str = ""

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def resources(self) -> dict[str, float]:
        """All resources of one node's share, in Ray's own names (``CPU``, ``GPU``, custom)."""
        out: dict[str, float] = {"CPU": self.cpus}
        if self.gpus:
            out["GPU"] = self.gpus
        out.update(self.custom)
        return out

    def task_options(self) -> dict[str, Any]:
        """``.options(...)`` for a node task scheduled without a placement group."""
        opts: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus}
        if self.custom:
            opts["resources"] = dict(self.custom)
        if self.labels:
            opts["label_selector"] = dict(self.labels)
        return opts

    def bundles(self) -> list[dict[str, float]]:
        """One placement-group bundle per node (used with STRICT_SPREAD: each on a distinct node)."""
        return [self.resources for _ in range(self.nodes)]

    def bundle_label_selector(self) -> list[dict[str, str]] | None:
        return [dict(self.labels) for _ in range(self.nodes)] if self.labels else None

    def describe(self) -> str:
        devices = bool(self.gpus or self.custom)  # a device run's launcher CPU is not worth naming
        what = ", ".join(f"{_fmt(v)} {k}" for k, v in self.resources.items() if k != "CPU" or not devices)
        where = f" with label {_labels_text(self.labels)}" if self.labels else ""
        name = f"cluster {self.cluster_name!r}" if self.cluster_name else "the run"
        return f"{name} needs {what} on each of {self.nodes} node(s){where}"


def demand_for(cluster: Mapping[str, Any]) -> NodeDemand:
    """Translate a cluster row (as a dict) into the Ray demand of one node of a run on it.

    gpu -> ``num_gpus`` (devices per node), ppu -> the custom resource ``PPU`` (or the cluster's
    ``resource_name``), cpu -> CPUs only, one per rank. A GPU/PPU node task reserves one CPU for the
    launcher; the rank processes it starts are not Ray tasks.
    """
    acc = str(cluster.get("accelerator") or "cpu").lower()
    nodes = max(1, int(cluster.get("nodes") or 1))
    given = cluster.get("devices_per_node")
    devices = int(given) if given is not None else 1
    labels = {str(k): str(v) for k, v in (cluster.get("labels") or {}).items()}
    name = str(cluster.get("name") or "")
    resource = cluster.get("resource_name") or {"gpu": "GPU", "ppu": "PPU"}.get(acc)
    if acc == "cpu" or not resource:
        ranks = max(1, devices)
        return NodeDemand(nodes, ranks, cpus=float(ranks), labels=labels, accelerator=acc, cluster_name=name)
    if devices < 1:
        raise ValueError(f"cluster {name!r}: a {acc} cluster needs devices_per_node >= 1")
    if resource == "GPU":
        return NodeDemand(
            nodes, devices, cpus=1.0, gpus=float(devices), labels=labels, accelerator=acc, cluster_name=name
        )
    return NodeDemand(
        nodes,
        devices,
        cpus=1.0,
        custom={str(resource): float(devices)},
        labels=labels,
        accelerator=acc,
        cluster_name=name,
    )


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    alive: bool
    resources: dict[str, float]
    labels: dict[str, str]

    @classmethod
    def from_ray(cls, raw: Mapping[str, Any]) -> NodeInfo:
        """One entry of ``ray.nodes()``."""
        return cls(
            node_id=str(raw.get("NodeID", "")),
            address=str(raw.get("NodeManagerAddress", "")),
            alive=bool(raw.get("Alive", raw.get("alive", False))),
            resources={str(k): float(v) for k, v in (raw.get("Resources") or {}).items()},
            labels={str(k): str(v) for k, v in (raw.get("Labels") or {}).items()},
        )


def label_matches(selector_value: str, actual: str | None) -> bool:
    """Ray label-selector semantics for one key: ``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``."""
    value = selector_value.strip()
    negate = value.startswith("!")
    if negate:
        value = value[1:].strip()
    m = re.fullmatch(r"in\((.*)\)", value)
    options = {v.strip() for v in m.group(1).split(",")} if m else {value}
    hit = actual is not None and actual in options
    return not hit if negate else hit


def node_matches_labels(node: NodeInfo, labels: Mapping[str, str]) -> bool:
    return all(label_matches(v, node.labels.get(k)) for k, v in labels.items())


def node_in_pool(node: NodeInfo, demand: NodeDemand) -> bool:
    """Whether ``node`` belongs to the pool of ``demand``'s cluster: its labels match the selector and it
    has every device resource the run asks for (CPU alone says nothing about a pool)."""
    if not node_matches_labels(node, demand.labels):
        return False
    return all(node.resources.get(k, 0.0) > 0 for k in demand.resources if k != "CPU")


def _fitting(demand: NodeDemand, nodes: Sequence[NodeInfo], *, some: bool = False) -> list[NodeInfo]:
    """The nodes with the labels of ``demand`` and enough of each resource for one node share (with
    ``some``: and more than none of each, as :func:`unplaceable_reason` asks of the Ray cluster)."""
    wanted = demand.resources.items()
    return [
        n
        for n in nodes
        if node_matches_labels(n, demand.labels)
        and all(n.resources.get(k, 0.0) >= v and (not some or n.resources.get(k, 0.0) > 0) for k, v in wanted)
    ]


def unplaceable_reason(demand: NodeDemand, nodes: Sequence[NodeInfo]) -> str | None:
    """None if ``demand.nodes`` distinct alive nodes could each hold one node share (ignoring what is
    busy right now: busy is worth waiting for, impossible is not); otherwise the reason, naming the
    missing resource or label."""
    alive = [n for n in nodes if n.alive]
    if len(_fitting(demand, alive, some=True)) >= demand.nodes:  # the usual case: nothing to say
        return None
    head = demand.describe()
    if not alive:
        return f"{head}; the Ray cluster has no alive node"
    labelled = [n for n in alive if node_matches_labels(n, demand.labels)]
    if not labelled:
        return f"{head}; the Ray cluster has no alive node with label {_labels_text(demand.labels)}"
    for name, _amount in demand.resources.items():
        if not any(n.resources.get(name, 0.0) > 0 for n in alive):
            return f"{head}; the Ray cluster has no node with resource {name!r}"
        if not any(n.resources.get(name, 0.0) > 0 for n in labelled):
            return f"{head}; no node with label {_labels_text(demand.labels)} has resource {name!r}"
    fit = _fitting(demand, labelled)
    if len(fit) >= demand.nodes:
        return None
    pool = f" with label {_labels_text(demand.labels)}" if demand.labels else ""
    # Name what is really short: the device resource before the launcher's CPU (the node that has
    # the devices nearly always has a CPU), and say how many nodes have enough of it.
    enough = {k: sum(n.resources.get(k, 0.0) >= v for n in labelled) for k, v in demand.resources.items()}
    short = [k for k in sorted(enough, key=lambda k: k == "CPU") if enough[k] < demand.nodes]
    if not short:  # enough of each, but not on the same nodes
        return f"{head}; only {len(fit)} alive node(s){pool} have all of it at once ({demand.nodes} needed)"
    name = short[0]
    return (
        f"{head}; only {len(fit)} alive node(s){pool} can hold that "
        f"({enough[name]} with {_fmt(demand.resources[name])} {name!r}, {demand.nodes} needed)"
    )


def _labels_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _fmt(v: float) -> str:
    return f"{v:g}"


def is_pool_resource(name: str) -> bool:
    """Whether a resource name says something about a pool (used when describing nodes)."""
    return not _IGNORED.match(name)


def device_resource(demand: NodeDemand) -> tuple[str, int] | None:
    """The device resource one node's share of a run holds and how many of it (``("PPU", 8)``), or None
    for a CPU run (nothing exclusive to hand out beyond what Ray counts)."""
    if demand.gpus:
        return "GPU", int(demand.gpus)
    if demand.custom:
        name, amount = next(iter(demand.custom.items()))
        return name, int(amount)
    return None


@dataclass(frozen=True)
class DeviceChoice:
    """The nodes (in node-rank order) and device indices on each that a run gets; or why it waits."""

    nodes: list[tuple[str, list[int]]] = field(default_factory=list)
    short: str = ""  # empty when ``nodes`` is the choice


def choose_devices(
    demand: NodeDemand,
    nodes: Sequence[NodeInfo],
    held: Mapping[str, set[int]],
    excluded: Sequence[str] = (),
) -> DeviceChoice:
    """``demand.nodes`` distinct alive pool nodes with enough free devices each (``held``: node id ->
    indices taken), best fit first (the node with the fewest free devices that fits), so a half-used
    node fills up before a whole one is split. ``short`` says what is missing when they do not exist."""
    wanted = device_resource(demand)
    if wanted is None:
        return DeviceChoice()
    resource, count = wanted
    pool = [n for n in nodes if n.alive and n.node_id not in excluded and node_in_pool(n, demand)]
    pool = [n for n in pool if all(n.resources.get(k, 0.0) >= v for k, v in demand.resources.items())]
    fits: list[tuple[int, str, list[int]]] = []
    for node in pool:
        taken = held.get(node.node_id, set())
        free = [i for i in range(int(node.resources.get(resource, 0.0))) if i not in taken]
        if len(free) >= count:
            fits.append((len(free), node.node_id, free[:count]))
    if len(fits) < demand.nodes:
        return DeviceChoice(
            short=f"{len(fits)} of {len(pool)} alive pool node(s) have {count} free {resource} "
            f"({demand.nodes} needed)"
        )
    fits.sort()
    return DeviceChoice([(node_id, free) for _, node_id, free in fits[: demand.nodes]])
