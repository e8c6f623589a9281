"""Which devices of a node a run may use: Ray's own GPU ids, or disjoint indices handed out per node.

Ray assigns GPU ids to a task that reserves ``num_gpus`` (and exports them as CUDA_VISIBLE_DEVICES), but
for a custom resource such as ``PPU`` it only counts: two runs holding 8 of a node's 16 PPUs would both
see every device. The :class:`DeviceAllocator` actor (one per dispatcher, like the progress board) hands
each node task of a run disjoint indices on its node; Ray's accounting already guarantees there are
enough, so the allocator only has to keep them apart. A node task releases its indices when it ends;
the dispatcher releases a run's indices again when it stops the run (a force-killed task cannot).
"""

from __future__ import annotations

from typing import Any

from ablate.backend.domain.placement import demand_for

Key = tuple[int, int, int]  # (run id, attempt, node rank)


class DeviceAllocator:
    """Ray actor: per node id, the device indices each (run, attempt, node) holds."""

    def __init__(self) -> None:
        self._held: dict[str, dict[Key, list[int]]] = {}

    def acquire(self, node_id: str, key: Key, count: int, total: int) -> list[int] | str:
        """``count`` free indices below ``total`` on ``node_id`` (the same ones again for the same key),
        or why there are none."""
        held = self._held.setdefault(node_id, {})
        key = (int(key[0]), int(key[1]), int(key[2]))
        if key in held:
            return held[key]
        used = {i for indices in held.values() for i in indices}
        free = [i for i in range(total) if i not in used]
        if len(free) < count:
            return f"{count} device(s) wanted, {len(free)} of {total} free on node {node_id}"
        held[key] = free[:count]
        return held[key]

    def release(self, run_id: int, attempt: int, node_rank: int | None = None) -> None:
        """Free what an attempt of a run holds (on one node rank, or on all of them)."""
        for held in self._held.values():
            for key in [k for k in held if k[:2] == (run_id, attempt) and node_rank in (None, k[2])]:
                del held[key]

    def holding(self) -> dict[str, dict[str, list[int]]]:
        """What is held, for tests and debugging: node id -> "run/attempt/node" -> indices."""
        return {n: {"/".join(map(str, k)): v for k, v in h.items()} for n, h in self._held.items() if h}


def node_devices(cluster: dict[str, Any], key: Key, allocator: Any) -> list[str] | None:
    """The device indices this node task may use (called inside the Ray task); None on a CPU cluster.
    Raises RuntimeError when the node has no free device to give."""
    import ray

    demand = demand_for(cluster)
    if demand.gpus:
        return [str(i) for i in ray.get_gpu_ids()]
    if not demand.custom or allocator is None:
        return None
    resource, amount = next(iter(demand.custom.items()))
    node_id = ray.get_runtime_context().get_node_id()
    total = next(
        (n.get("Resources", {}).get(resource, 0.0) for n in ray.nodes() if n.get("NodeID") == node_id), 0.0
    )
    got = ray.get(allocator.acquire.remote(node_id, key, int(amount), int(total)))
    if isinstance(got, str):
        raise RuntimeError(f"no free {resource} device: {got}")
    return [str(i) for i in got]
