"""Catalog routes over HTTP: releases, variants, workloads, clusters."""

from __future__ import annotations

import httpx

from tests.api.helpers import (
    CLUSTER,
    REF,
    RELEASE,
    VARIANT,
    WORKLOAD,
    assert_problem,
    create_release,
    snapshot,
)
from tests.support.live_server import LiveServer


def test_releases_create_list_filter_get_update(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client
) -> None:
    created = create_release(admin)
    assert created["ref"] == REF and created["manifest"] == RELEASE["manifest"]
    create_release(
        admin, image="training-xpu-pytorch", tag="26.01", platform="ppu", release_date="2026-01-20"
    )
    assert [r["ref"] for r in client.get("/releases").json()] == [REF, "training-xpu-pytorch:26.01"]
    assert [r["ref"] for r in client.get("/releases", params={"platform": "ppu"}).json()] == [
        "training-xpu-pytorch:26.01"
    ]
    assert [r["ref"] for r in client.get("/releases", params={"image": "training-nv-pytorch"}).json()] == [
        REF
    ]
    assert client.get(f"/releases/{REF}").json()["id"] == created["id"]
    notes = {"features": ["flashinfer 0.5.3"], "known_issues": ["NCCL_SOCKET_IFNAME must be set"]}
    patched = admin.patch(f"/releases/{REF}", json={"notes": notes, "manifest": {"torch": "2.9.1"}})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["notes"]["features"] == ["flashinfer 0.5.3"] and body["manifest"] == {"torch": "2.9.1"}
    assert body["platform"] == "gpu" and body["release_date"] == "2025-12-15"


def test_release_refusals_change_nothing(live_server: LiveServer, admin: httpx.Client) -> None:
    create_release(admin)
    before = snapshot(live_server.database)
    assert_problem(admin.post("/releases", json=RELEASE), 409, loc="release")
    assert_problem(admin.post("/releases", json={**RELEASE, "platform": "tpu"}), 422, loc="platform")
    assert_problem(admin.post("/releases", json={**RELEASE, "notse": {}}), 422, loc="notse")
    assert_problem(admin.get("/releases/training-nv-pytorch:99.99"), 404, loc="ref")
    assert_problem(admin.get("/releases/no-tag"), 422, loc="ref")
    assert_problem(admin.patch(f"/releases/{REF}", json={"platform": "ppu"}), 422, loc="platform")
    # Versions are text end to end: a number would have lost "2.10" -> 2.1 already.
    numeric = {**RELEASE, "tag": "26.02", "manifest": {"torch": 2.1}}
    assert_problem(admin.post("/releases", json=numeric), 422, loc="manifest.torch")
    assert_problem(admin.patch(f"/releases/{REF}", json={"manifest": {"vllm": 12}}), 422, loc="manifest.vllm")
    assert snapshot(live_server.database) == before


def test_variants_workloads_clusters(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client
) -> None:
    for plural, definition in (("variants", VARIANT), ("workloads", WORKLOAD), ("clusters", CLUSTER)):
        r = admin.post(f"/{plural}", json=definition)
        assert r.status_code == 201, r.text
        got = client.get(f"/{plural}/{definition['name']}")
        assert got.status_code == 200, got.text
        assert got.json()["name"] == definition["name"]
        assert [e["name"] for e in client.get(f"/{plural}").json()] == [definition["name"]]
        before = snapshot(live_server.database)
        assert_problem(admin.post(f"/{plural}", json=definition), 409, loc="name")
        assert_problem(client.get(f"/{plural}/nope"), 404, loc="name")
        assert_problem(admin.post(f"/{plural}", json={**definition, "colour": "red"}), 422, loc="colour")
        assert_problem(admin.post(f"/{plural}", json={**definition, "name": "x" * 201}), 422, loc="name")
        assert snapshot(live_server.database) == before
    # factors are stored canonical and sorted
    assert client.get(f"/variants/{VARIANT['name']}").json()["factors"] == ["ac2", "accl", "compiler_opt"]
    assert client.get("/workloads/deepspeed/llama3-8b").json()["seq_len"] == 8192
    assert_problem(admin.post("/clusters", json={**CLUSTER, "name": "c2", "nodes": 0}), 422, loc="nodes")


def test_launch_and_visible_devices_env_are_checked_at_the_edge(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client
) -> None:
    before = snapshot(live_server.database)
    bad_launch = {**WORKLOAD, "runner": "command", "runner_options": {"launch": "per-rack"}}
    body = assert_problem(admin.post("/workloads", json=bad_launch), 422, loc="runner_options")
    assert "runner_options.launch must be one of per-node, per-device, not 'per-rack'" in body["detail"]
    assert_problem(admin.post("/variants", json={"name": "v", "runner_options": {"launch": 2}}), 422)
    # per-node is the command runner's; torch-llm (the default runner) is its own per-device launcher
    per_node = {**WORKLOAD, "runner_options": {"launch": "per-node"}}
    assert "command runner" in assert_problem(admin.post("/workloads", json=per_node), 422)["detail"]
    cpu = {**CLUSTER, "accelerator": "cpu", "visible_devices_env": "PPU_VISIBLE_DEVICES"}
    assert "cpu cluster has none" in assert_problem(admin.post("/clusters", json=cpu), 422)["detail"]
    not_a_name = {**CLUSTER, "visible_devices_env": "PPU VISIBLE"}
    assert_problem(admin.post("/clusters", json=not_a_name), 422, loc="visible_devices_env")
    assert snapshot(live_server.database) == before
    ppu = {**CLUSTER, "name": "ppu-2x16", "accelerator": "ppu", "visible_devices_env": "PPU_VISIBLE_DEVICES"}
    assert admin.post("/clusters", json=ppu).status_code == 201
    assert client.get("/clusters/ppu-2x16").json()["visible_devices_env"] == "PPU_VISIBLE_DEVICES"
    good = {**WORKLOAD, "runner": "command", "runner_options": {"launch": "per-device", "command": "x"}}
    assert admin.post("/workloads", json=good).status_code == 201


def test_a_cluster_s_container_runtime_and_a_release_s_registry(
    admin: httpx.Client, client: httpx.Client
) -> None:
    podman = {
        **CLUSTER,
        "name": "gpu-podman",
        "container": {"runtime": "podman", "mounts": ["/data:/data:ro"]},
    }
    made = admin.post("/clusters", json=podman)
    assert made.status_code == 201, made.text
    assert made.json()["container"]["runtime"] == "podman"
    assert made.json()["container"]["pull"] == "missing"  # the defaults are stored, not guessed later
    bad = {**CLUSTER, "name": "gpu-lxc", "container": {"runtime": "lxc"}}
    problem = assert_problem(admin.post("/clusters", json=bad), 422, loc="container")
    assert "container.runtime must be one of" in str(problem)
    assert client.get("/clusters/gpu-lxc").status_code == 404  # nothing half-written
    release = {**RELEASE, "tag": "26.02", "image_registry": "registry.example.com:5000/acs"}
    created = admin.post("/releases", json=release)
    assert created.status_code == 201, created.text
    assert created.json()["image_registry"] == "registry.example.com:5000/acs"
    assert_problem(admin.post("/releases", json={**release, "tag": "26.03", "image_registry": "https://x"}),
                   422, loc="image_registry")  # fmt: skip
