"""Resource demands and the unplaceable check, against realistic ``ray.nodes()`` entries."""

from __future__ import annotations

from typing import Any

import pytest

from ablate.backend.domain.placement import NodeInfo, demand_for, label_matches, unplaceable_reason


def node(resources: dict[str, float], labels: dict[str, str] | None = None, alive: bool = True) -> NodeInfo:
    raw: dict[str, Any] = {
        "NodeID": "n" * 8,
        "Alive": alive,
        "NodeManagerAddress": "10.0.0.1",
        "Resources": {"CPU": 64.0, "memory": 1e12, "node:10.0.0.1": 1.0, **resources},
        "Labels": {"ray.io/node-id": "n" * 8, **(labels or {})},
    }
    return NodeInfo.from_ray(raw)


GPU_NODE = node({"GPU": 8.0}, {"ray.io/accelerator-type": "H100", "pool": "gpu"})
PPU_NODE = node({"PPU": 16.0}, {"pool": "ppu"})


def test_gpu_cluster_asks_for_num_gpus_and_selects_by_label() -> None:
    d = demand_for({"name": "h100", "accelerator": "gpu", "nodes": 1, "devices_per_node": 8,
                    "labels": {"ray.io/accelerator-type": "H100"}})  # fmt: skip
    assert d.task_options() == {
        "num_cpus": 1.0,
        "num_gpus": 8.0,
        "label_selector": {"ray.io/accelerator-type": "H100"},
    }
    assert unplaceable_reason(d, [GPU_NODE, PPU_NODE]) is None


def test_ppu_cluster_asks_for_the_custom_resource() -> None:
    d = demand_for({"name": "ppu-16", "accelerator": "ppu", "nodes": 2, "devices_per_node": 16,
                    "labels": {"pool": "ppu"}})  # fmt: skip
    assert d.task_options()["resources"] == {"PPU": 16.0}
    assert d.task_options()["num_gpus"] == 0.0
    assert d.bundles() == [{"CPU": 1.0, "PPU": 16.0}] * 2
    assert d.bundle_label_selector() == [{"pool": "ppu"}] * 2
    assert d.world_size == 32
    assert unplaceable_reason(d, [PPU_NODE, node({"PPU": 16.0}, {"pool": "ppu"})]) is None


def test_cpu_cluster_asks_for_cpus_per_rank() -> None:
    d = demand_for({"name": "cpu", "accelerator": "cpu", "nodes": 1, "devices_per_node": 2})
    assert d.task_options() == {"num_cpus": 2.0, "num_gpus": 0.0}
    assert d.ranks_per_node == 2


def test_missing_resource_is_named() -> None:
    d = demand_for({"name": "ppu-16", "accelerator": "ppu", "nodes": 2, "devices_per_node": 16,
                    "labels": {"pool": "ppu"}})  # fmt: skip
    reason = unplaceable_reason(d, [node({}, {"pool": "ppu"})])
    assert reason == (
        "cluster 'ppu-16' needs 16 PPU on each of 2 node(s) with label pool=ppu; "
        "the Ray cluster has no node with resource 'PPU'"
    )


def test_missing_label_and_too_few_nodes_are_named() -> None:
    d = demand_for({"name": "ppu", "accelerator": "ppu", "nodes": 2, "devices_per_node": 16,
                    "labels": {"pool": "ppu"}})  # fmt: skip
    assert "no alive node with label pool=ppu" in str(unplaceable_reason(d, [GPU_NODE]))
    reason = str(unplaceable_reason(d, [PPU_NODE, node({"PPU": 8.0}, {"pool": "ppu"})]))
    assert "only 1 alive node(s) with label pool=ppu" in reason and "'PPU'" in reason
    assert "no alive node" in str(unplaceable_reason(d, [node({"PPU": 16.0}, {"pool": "ppu"}, alive=False)]))


def test_more_nodes_than_the_pool_has_blames_the_device_not_the_cpu() -> None:
    d = demand_for({"name": "ppu-4x16", "accelerator": "ppu", "nodes": 4, "devices_per_node": 16,
                    "labels": {"pool": "ppu"}})  # fmt: skip
    decoy = node({"PPU": 16.0}, {"pool": "gpu"})  # the resource, the wrong label
    reason = str(unplaceable_reason(d, [PPU_NODE, node({"PPU": 16.0}, {"pool": "ppu"}), decoy, GPU_NODE]))
    assert reason.endswith(
        "only 2 alive node(s) with label pool=ppu can hold that (2 with 16 'PPU', 4 needed)"
    ), reason
    # a real CPU shortage is still named as such
    no_cpu = [node({"PPU": 16.0, "CPU": 0.5}, {"pool": "ppu"}) for _ in range(4)]
    assert "(0 with 1 'CPU', 4 needed)" in str(unplaceable_reason(d, no_cpu))


@pytest.mark.parametrize(
    ("selector", "actual", "ok"),
    [("ppu", "ppu", True), ("ppu", "gpu", False), ("!ppu", "gpu", True), ("in(a, b)", "b", True),
     ("!in(a,b)", "a", False), ("x", None, False), ("!x", None, True)],
)  # fmt: skip
def test_label_selector_operators(selector: str, actual: str | None, ok: bool) -> None:
    assert label_matches(selector, actual) is ok
