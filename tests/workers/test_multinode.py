"""A multi-node run end to end on a real Ray of two nodes: placement group, rendezvous on node 0, one
node task per node with global ranks, and the placement group removed afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from ablate.backend.db.database import Database
from ablate.backend.db.models import Variant
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from tests.workers.conftest import queue_study, runs_of

ROOT = Path(__file__).resolve().parents[2]


def _drain_on(module: str, db_url: str, data_dir: Path) -> dict[str, Any]:
    """Run ``tests.workers.<module>`` (a dispatcher on a local Ray cluster of its own) to the end;
    returns the JSON report it prints last."""
    proc = subprocess.run(
        [sys.executable, "-m", f"tests.workers.{module}", db_url, str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def test_two_node_run_through_a_placement_group(database: Database, db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    two = ClusterDef(name="cpu-2x1", accelerator="cpu", nodes=2, devices_per_node=1)
    q = queue_study(
        database,
        cluster=two,
        variants=[VariantDef(name="A"), VariantDef(name="F", runner_options={"fail": True})],
        workloads=[WorkloadDef(name="fake", runner="fake", runner_options={"steps": 3})],
    )
    report = _drain_on("two_nodes", db_url, tmp_path)
    runs = {r.error is None: r for r in runs_of(database, q.study_id)}
    ok, failed = runs[True], runs[False]
    assert ok.status == "succeeded" and ok.attempt == 1
    assert ok.provenance["world"] == "2x1"  # rank 0 of a world of 2, one rank per node
    assert ok.provenance["ray_demand"] == "cluster 'cpu-2x1' needs 1 CPU on each of 2 node(s)"
    # a benchmark failure on the nodes is recorded as it is, not retried
    assert (failed.status, failed.failure_kind, failed.attempt) == ("failed", "benchmark", 1)
    assert failed.error == "the benchmark failed by itself"
    assert report["placement_groups"] and set(report["placement_groups"]) == {"REMOVED"}


# Each process of the command writes what it was given; the "pair" runs wait (bounded) until both hold
# their devices at once, so their device sets are compared while both are in use.
RECORD = r"""
import json, os, sys, time
from pathlib import Path
out = Path(os.environ["OUT"])
out.mkdir(parents=True, exist_ok=True)
keys = ["TAG", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT"]
keys += ["RANK", "WORLD_SIZE", "LOCAL_RANK", "PPU_VISIBLE_DEVICES"]
rec = {k: os.environ.get(k) for k in keys}
tmp = out / f"{os.getpid()}.tmp"
tmp.write_text(json.dumps(rec))
tmp.rename(out / f"{os.getpid()}.json")
def pairs():
    return sum(json.loads(p.read_text())["TAG"] == "pair" for p in out.glob("*.json"))
end = time.time() + 150
while rec["TAG"] == "pair" and pairs() < 2 and time.time() < end:
    time.sleep(0.2)
print(f"node {rec['NODE_RANK']} rank {rec['RANK']}", flush=True)
for step in (1, 2, 3):
    print(json.dumps({"step": step, "step_time_s": 0.1}), flush=True)
"""


def _launched(out: Path, tag: str) -> list[dict[str, str | None]]:
    recs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    return [r for r in recs if r["TAG"] == tag]


def test_command_launch_device_isolation_and_node_logs_on_fake_ppu_nodes(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    from ablate.backend.schemas.catalog import ReleaseCreate
    from tests.support.live_server import start_live_server

    out = tmp_path / "launched"
    release = ReleaseCreate(image="training-ppu-pytorch", tag="26.01", platform="ppu")
    workload = WorkloadDef(
        name="record",
        runner="command",
        parser="jsonl",
        runner_options={"command": [sys.executable, "-c", RECORD]},
    )
    env = "PPU_VISIBLE_DEVICES"
    two = ClusterDef(
        name="ppu-2x2", accelerator="ppu", nodes=2, devices_per_node=2, labels={"pool": "ppu"},
        visible_devices_env=env,
    )  # fmt: skip
    rack_a = ClusterDef(
        name="ppu-1x8-a", accelerator="ppu", nodes=1, devices_per_node=8,
        labels={"pool": "ppu", "rack": "a"}, visible_devices_env=env,
    )  # fmt: skip
    spread = queue_study(
        database,
        cluster=two,
        release=release,
        workloads=[workload],
        variants=[
            VariantDef(name="node", env={"OUT": str(out), "TAG": "node"}),
            VariantDef(
                name="device", env={"OUT": str(out), "TAG": "device"}, runner_options={"launch": "per-device"}
            ),
        ],
    )
    pair = queue_study(
        database,
        cluster=rack_a,
        release=release,
        workloads=[workload],
        variants=[VariantDef(name=f"pair{i}", env={"OUT": str(out), "TAG": "pair"}) for i in (1, 2)],
    )
    report = _drain_on("ppu_nodes", db_url, tmp_path)
    assert report["held"] == {}  # every device given back
    with database.read() as s:
        names = {variant_id: name for variant_id, name in s.execute(select(Variant.id, Variant.name))}
    runs = {
        names[r.variant_id]: r for r in runs_of(database, spread.study_id) + runs_of(database, pair.study_id)
    }
    assert {n: (r.status, r.error) for n, r in runs.items()} == {n: ("succeeded", None) for n in runs}

    # per-node (the default): exactly one launcher per node, torchrun-style, that node's devices visible
    per_node = _launched(out, "node")
    assert sorted(r["NODE_RANK"] for r in per_node) == ["0", "1"]
    assert {(r["NNODES"], r["NPROC_PER_NODE"], r["RANK"], r["WORLD_SIZE"]) for r in per_node} == {
        ("2", "2", None, None)
    }
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in per_node}) == 1
    assert all(len(r["PPU_VISIBLE_DEVICES"].split(",")) == 2 for r in per_node)
    # per-device: one process per device, global ranks
    per_device = _launched(out, "device")
    assert sorted(int(r["RANK"]) for r in per_device) == [0, 1, 2, 3]
    assert {(r["WORLD_SIZE"], r["NNODES"]) for r in per_device} == {("4", "2")}
    assert sorted((r["NODE_RANK"], r["LOCAL_RANK"]) for r in per_device) == [
        ("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")
    ]  # fmt: skip
    # two 8-device runs on one 16-PPU node at once: disjoint devices
    seen = [set(r["PPU_VISIBLE_DEVICES"].split(",")) for r in _launched(out, "pair")]
    assert len(seen) == 2 and all(len(s) == 8 for s in seen) and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {str(i) for i in range(16)}

    # every node's facts in the provenance
    prov = runs["node"].provenance
    assert prov["launch"] == "per-node"
    assert prov["node0.node_id"] != prov["node1.node_id"] and prov["node0.host"] and prov["node1.host"]
    for n in (0, 1):
        assert prov[f"node{n}.visible_devices"].startswith(f"{env}=")
    assert {runs[f"pair{i}"].provenance["node0.visible_devices"] for i in (1, 2)} == {
        f"{env}={','.join(sorted(s, key=int))}" for s in seen
    }

    # each node's log (each rank's, per device) listed and downloadable through the API
    server = start_live_server(db_url, settings={"data_dir": str(tmp_path)})
    try:
        with httpx.Client(base_url=server.api, timeout=30) as http:
            node_run, device_run = runs["node"].id, runs["device"].id
            listed = http.get(f"/runs/{node_run}/logs").json()["items"]
            assert [(i["name"], i["node_rank"], i["rank"]) for i in listed] == [
                ("node0.log", 0, None), ("node1.log", 1, None)
            ]  # fmt: skip
            assert [i["host"] for i in listed] == [prov["node0.host"], prov["node1.host"]]
            for item in listed:
                got = http.get(item["url"].removeprefix("/api/v1"))
                assert got.status_code == 200 and len(got.content) == item["size"]
                assert f"node {item['node_rank']} rank None" in got.text
            names = [i["name"] for i in http.get(f"/runs/{device_run}/logs").json()["items"]]
            assert names == ["node0-rank0.log", "node0-rank1.log", "node1-rank2.log", "node1-rank3.log"]
            assert "node 1 rank 3" in http.get(f"/runs/{device_run}/logs/node1-rank3.log").text
            for bad in ("node9.log", "..%2F..%2Fablate.sqlite", "run.log"):
                assert http.get(f"/runs/{node_run}/logs/{bad}").status_code == 404
        page = httpx.get(f"{server.url}/runs/{node_run}", timeout=30).text  # the run page links each file
        assert f'href="/runs/{node_run}/logs/node1.log?attempt=1"' in page
        assert (
            "node 1 rank None" in httpx.get(f"{server.url}/runs/{node_run}/logs/node1.log", timeout=30).text
        )
    finally:
        server.stop()
