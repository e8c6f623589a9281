"""The execution spec of a run, built from its rows: a pure function (no Ray, no database)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ablate.backend.config import Settings
from ablate.backend.domain.runner import RunSpec
from ablate.workers.dispatch.spec import (
    RunRows,
    build_execution_spec,
    multi_node_specs,
    single_node_specs,
)


def _rows(
    *,
    cluster: dict[str, Any] | None = None,
    variant: dict[str, Any] | None = None,
    workload: dict[str, Any] | None = None,
    release: dict[str, Any] | None = None,
    attempt: int = 1,
) -> RunRows:
    return RunRows(
        run_id=41,
        attempt=attempt,
        release_ref="training-nv-pytorch:25.12",
        workload={
            "name": "llama-8b",
            "runner": "torch-llm",
            "runner_options": {"steps": 20},
            **(workload or {}),
        },
        variant={"name": "Base", "position": 0, "env": {}, "image": None, **(variant or {})},
        cluster={
            "name": "gpu-8",
            "accelerator": "gpu",
            "nodes": 1,
            "devices_per_node": 8,
            "labels": {"pool": "gpu"},
            "interconnect": None,
            "resource_name": None,
            **(cluster or {}),
        },
        release={
            "image": "training-nv-pytorch",
            "tag": "25.12",
            "platform": "gpu",
            "manifest": {"cuda": "13.0"},
            "driver_requirements": {"13.0": ">=580"},
            "notes": {},
            **(release or {}),
        },
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, run_timeout_s=900.0)


def test_single_node_gpu_run(settings: Settings) -> None:
    rows = _rows(attempt=2)
    ex = build_execution_spec(rows, settings, "host:1:abc")
    assert (ex.run_id, ex.attempt) == (41, 2)
    spec = ex.spec
    assert spec.run_id == 41 and spec.runner_name == "torch-llm"
    assert spec.log_dir == str(settings.log_dir)
    assert spec.timeout_s == ex.timeout_s == 900.0  # the settings' default: no runner option sets one
    # one node task whose runner starts the node's 8 ranks itself
    assert (spec.world_size, spec.local_world_size, spec.rank) == (1, 8, 0)
    assert spec.workload == rows.workload and spec.variant == rows.variant and spec.cluster == rows.cluster
    assert ex.demand.nodes == 1 and ex.demand.gpus == 8.0 and ex.demand.labels == {"pool": "gpu"}
    assert spec.env == {"NCCL_SOCKET_IFNAME": "eth0"}  # release rule for 8 devices per pod
    assert ex.checks == {
        "accelerator": "gpu",
        "expected_devices": 8,
        "driver_requirements": {"13.0": ">=580"},
        "cuda_version": "13.0",  # from the release manifest
        "attempt": 2,
    }
    assert ex.runtime_env is None
    assert ex.provenance["dispatcher"] == "host:1:abc"
    assert ex.provenance["attempt"] == "2"
    assert ex.provenance["release"] == "training-nv-pytorch:25.12"
    assert (
        ex.provenance["ray_demand"] == "cluster 'gpu-8' needs 8 GPU on each of 1 node(s) with label pool=gpu"
    )
    assert ex.provenance["env_rule.NCCL_SOCKET_IFNAME"].startswith("eth0 (nccl-socket-ifname:")
    assert "image" not in ex.provenance
    # the node task's one spec travels as a dict and comes back equal
    (node,) = single_node_specs(spec)
    (one,) = node
    assert RunSpec.from_dict(one) == spec


def test_variant_runner_options_override_the_workload_s(settings: Settings) -> None:
    rows = _rows(
        workload={"runner_options": {"timeout_s": 60, "cuda_version": "12.8", "min_free_fraction": 0.5}},
        variant={"runner_options": {"timeout_s": 30}},
    )
    ex = build_execution_spec(rows, settings, "d")
    assert ex.timeout_s == 30.0
    assert ex.checks["cuda_version"] == "12.8"  # the runner option wins over the manifest's
    assert ex.checks["min_free_fraction"] == 0.5


def test_min_free_fraction_is_only_a_check_when_asked_for(settings: Settings) -> None:
    assert "min_free_fraction" not in build_execution_spec(_rows(), settings, "d").checks


PODMAN = {"runtime": "podman", "options": ["--shm-size=1g"], "mounts": ["/data:/data:ro"]}


def test_variant_image_wins_on_a_cluster_with_a_container_runtime(settings: Settings) -> None:
    rows = _rows(
        variant={"image": "registry/ac2:26.01", "env": {"CHECKPOINT_OPTIMIZATION": "true"}},
        cluster={"container": PODMAN},
    )
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.env == {"NCCL_SOCKET_IFNAME": "eth0", "CHECKPOINT_OPTIMIZATION": "true"}
    assert ex.spec.container is not None
    assert ex.spec.container["image"] == "registry/ac2:26.01"
    assert ex.spec.container["runtime"] == "podman"
    assert ex.spec.container["options"] == ["--shm-size=1g"]
    assert ex.spec.container["attempt"] == 1
    assert ex.runtime_env is None  # Ray's image_uri is opt-in only
    assert ex.refusal is None
    assert ex.provenance["image"] == "registry/ac2:26.01"
    assert ex.provenance["execution"] == "container (podman)"


def test_a_rung_without_an_image_runs_in_its_release_s_image_from_its_registry(settings: Settings) -> None:
    rows = _rows(
        cluster={"container": {"runtime": "docker"}}, release={"image_registry": "reg.example:5000/acs"}
    )
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.container is not None
    assert ex.spec.container["image"] == "reg.example:5000/acs/training-nv-pytorch:25.12"
    assert ex.provenance["execution"] == "container (docker)"
    no_registry = build_execution_spec(_rows(cluster={"container": PODMAN}), settings, "d")
    assert no_registry.spec.container is not None
    assert no_registry.spec.container["image"] == "training-nv-pytorch:25.12"


def test_a_cluster_without_a_container_runs_on_the_host_and_refuses_a_variant_image(
    settings: Settings,
) -> None:
    host = build_execution_spec(_rows(), settings, "d")
    assert host.spec.container is None and host.refusal is None
    assert host.provenance["execution"] == "host"
    assert "image" not in host.provenance
    refused = build_execution_spec(_rows(variant={"image": "registry/ac2:26.01"}), settings, "d")
    assert refused.refusal is not None
    assert "registry/ac2:26.01" in refused.refusal and "no container runtime" in refused.refusal


def test_ray_image_uri_is_an_opt_in_named_for_what_it_is(settings: Settings) -> None:
    rows = _rows(variant={"image": "registry/ac2:26.01"}, cluster={"container": {"runtime": "ray-image-uri"}})
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.container is None
    assert ex.runtime_env == {"image_uri": "registry/ac2:26.01", "env_vars": ex.spec.env}
    assert ex.runtime_env["env_vars"] is not ex.spec.env  # a copy: Ray may hold on to it
    assert ex.provenance["execution"] == "ray-image-uri"


def test_variant_env_overrides_a_release_rule_and_says_so(settings: Settings) -> None:
    rows = _rows(variant={"env": {"NCCL_SOCKET_IFNAME": "bond0"}})
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.env["NCCL_SOCKET_IFNAME"] == "bond0"
    assert ex.provenance["env_rule.overridden_by_variant"] == "NCCL_SOCKET_IFNAME"


def test_ppu_run_with_transformer_engine(settings: Settings) -> None:
    rows = _rows(
        cluster={"name": "ppu-16", "accelerator": "ppu", "devices_per_node": 16, "interconnect": "HPN"},
        release={"platform": "ppu", "manifest": {"transformer_engine": "2.4"}, "driver_requirements": {}},
    )
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.env == {"NCCL_SOCKET_IFNAME": "hpn0", "NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0"}
    assert ex.demand.custom == {"PPU": 16.0} and ex.demand.gpus == 0.0
    assert ex.checks["accelerator"] == "ppu" and ex.checks["expected_devices"] == 16
    assert ex.checks["cuda_version"] is None  # no manifest entry, no runner option: weakest rule applies


def test_cpu_run_checks_no_devices(settings: Settings) -> None:
    rows = _rows(cluster={"name": "cpu-2", "accelerator": "cpu", "devices_per_node": 2, "labels": {}})
    ex = build_execution_spec(rows, settings, "d")
    assert ex.checks["expected_devices"] == 0
    assert ex.demand.cpus == 2.0 and ex.spec.local_world_size == 2
    assert ex.spec.env == {}  # the NCCL rules are for device pods


def test_multi_node_run_gets_one_spec_per_rank(settings: Settings) -> None:
    rows = _rows(cluster={"nodes": 2, "devices_per_node": 4})
    ex = build_execution_spec(rows, settings, "d")
    assert ex.spec.local_world_size == 1  # each rank is its own process, wired by the node task
    assert ex.demand.nodes == 2 and ex.demand.bundles() == [{"CPU": 1.0, "GPU": 4.0}] * 2
    per_node = multi_node_specs(ex.spec, ex.demand, "10.0.0.7", 29611)
    assert len(per_node) == 2 and all(len(n) == 4 for n in per_node)
    ranks = [RunSpec.from_dict(s) for node in per_node for s in node]
    assert [r.rank for r in ranks] == list(range(8))
    assert [r.local_rank for r in ranks] == [0, 1, 2, 3] * 2
    assert {(r.world_size, r.local_world_size, r.master_addr, r.master_port) for r in ranks} == {
        (8, 4, "10.0.0.7", 29611)
    }
    assert all(r.env == ex.spec.env and r.run_id == 41 for r in ranks)
    assert ex.spec.rank == 0 and ex.spec.world_size == 1  # the lead spec itself is left as it was


def test_the_rows_are_not_changed(settings: Settings) -> None:
    rows = _rows(variant={"image": "img", "env": {"A": "1"}, "runner_options": {"timeout_s": 5}})
    before = copy.deepcopy(rows)
    ex = build_execution_spec(rows, settings, "d")
    ex.spec.env["B"] = "2"
    ex.spec.workload["extra"] = True
    assert rows == before


def test_a_device_cluster_without_devices_is_refused(settings: Settings) -> None:
    with pytest.raises(ValueError, match="needs devices_per_node >= 1"):
        build_execution_spec(_rows(cluster={"devices_per_node": 0}), settings, "d")


def _command(launch: str | None, nodes: int, devices: int = 4) -> dict[str, Any]:
    opts = {"command": "torchrun train.py", **({"launch": launch} if launch else {})}
    return {
        "workload": {"runner": "command", "runner_options": opts},
        "cluster": {"nodes": nodes, "devices_per_node": devices},
    }


def test_command_runs_launch_once_per_node_by_default(settings: Settings) -> None:
    ex = build_execution_spec(_rows(**_command(None, 2)), settings, "d")
    assert ex.spec.launch == "per-node" and ex.provenance["launch"] == "per-node"
    per_node = multi_node_specs(ex.spec, ex.demand, "10.0.0.7", 29611)
    assert [len(n) for n in per_node] == [1, 1]  # one launcher per node, not one per device
    nodes = [RunSpec.from_dict(n[0]) for n in per_node]
    assert [(s.node_rank, s.nnodes, s.local_world_size) for s in nodes] == [(0, 2, 4), (1, 2, 4)]
    assert {(s.master_addr, s.master_port) for s in nodes} == {("10.0.0.7", 29611)}


def test_a_one_node_command_run_is_one_launcher_with_a_port_picked_on_the_node(settings: Settings) -> None:
    ex = build_execution_spec(_rows(**_command(None, 1)), settings, "d")
    ((one,),) = single_node_specs(ex.spec)
    spec = RunSpec.from_dict(one)
    assert (spec.node_rank, spec.nnodes, spec.local_world_size, spec.master_port) == (0, 1, 4, 0)


def test_per_device_launch_gives_every_device_its_rank(settings: Settings) -> None:
    ex = build_execution_spec(_rows(**_command("per-device", 2, 3)), settings, "d")
    ranks = [RunSpec.from_dict(s) for node in multi_node_specs(ex.spec, ex.demand, "h", 1) for s in node]
    assert [(r.node_rank, r.rank, r.local_rank) for r in ranks] == [
        (0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 3, 0), (1, 4, 1), (1, 5, 2)
    ]  # fmt: skip
    assert {(r.world_size, r.nnodes) for r in ranks} == {(6, 2)}
    (node,) = single_node_specs(
        build_execution_spec(_rows(**_command("per-device", 1, 3)), settings, "d").spec
    )
    assert [RunSpec.from_dict(s).rank for s in node] == [0, 1, 2]


def test_a_bad_stored_launch_fails_loudly(settings: Settings) -> None:
    with pytest.raises(ValueError, match=r"runner_options\.launch must be one of per-node, per-device"):
        build_execution_spec(_rows(**_command("per-rack", 1)), settings, "d")
