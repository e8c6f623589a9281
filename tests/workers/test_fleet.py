"""Devices are exclusive across dispatchers and restarts, busy pools wait instead of failing, and
preflight checks a run's own devices: on a local Ray of fake PPU nodes and a fake GPU node
(tests/workers/fleet_nodes.py: real raylets, a real ``ppu-smi`` stand-in that reports a device busy
while a live process holds it, and a runner that writes down any device it finds held by another
live run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ablate.backend.db.database import Database
from ablate.backend.db.models import DeviceAllocation, Run
from ablate.backend.schemas.catalog import ClusterDef, ReleaseCreate, VariantDef, WorkloadDef
from tests.workers.conftest import queue_study, run_own_ray, runs_of

PPU = ReleaseCreate(image="training-ppu-pytorch", tag="26.01", platform="ppu")


def _ppu(name: str, nodes: int, devices: int, **labels: str) -> ClusterDef:
    return ClusterDef(
        name=name, accelerator="ppu", nodes=nodes, devices_per_node=devices, labels={"pool": "ppu", **labels}
    )


def _workload(tmp_path: Path, steps: int, step_s: float) -> WorkloadDef:
    opts = {"steps": steps, "step_s": step_s, "hold_dir": str(tmp_path / "held")}
    return WorkloadDef(name=f"hold-{steps}x{step_s:g}", runner="fake", runner_options=opts)


def _variants(n: int) -> list[VariantDef]:
    return [VariantDef(name=f"v{i}") for i in range(n)]


def _run(db_url: str, tmp_path: Path, scenario: str) -> dict[str, Any]:
    pytest.importorskip("ray")
    report = run_own_ray("fleet_nodes", db_url, str(tmp_path), scenario)
    collisions = sorted(p.name for p in (tmp_path / "held").glob("collision-*"))
    assert collisions == []  # no device was ever held by two live runs
    return report


def _visible(run: Run, node: int = 0) -> set[str]:
    return set(run.provenance[f"node{node}.visible_devices"].split("=")[1].split(","))


def _nothing_held(database: Database) -> None:
    with database.read() as s:
        assert s.scalar(select(func.count()).select_from(DeviceAllocation)) == 0


def test_two_dispatchers_two_runs_on_one_node_get_disjoint_devices_and_pass_ppu_preflight(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    q = queue_study(
        database,
        cluster=_ppu("ppu-a-8", 1, 8, rack="a"),
        release=PPU,
        variants=_variants(2),
        workloads=[_workload(tmp_path, 4, 0.5)],
    )
    _run(db_url, tmp_path, "two")
    first, second = runs_of(database, q.study_id)
    # both ran, each at its first attempt: the second's preflight (8 of a 16-PPU node, the other 8 busy)
    # checked its own devices, not the whole node
    assert [(r.status, r.attempt, r.error) for r in (first, second)] == [("succeeded", 1, None)] * 2
    assert not _visible(first) & _visible(second)
    for run in (first, second):
        assert run.provenance["preflight.devices"] == ",".join(sorted(_visible(run), key=int))
    _nothing_held(database)


def test_a_hung_dispatcher_s_run_never_shares_devices_with_what_runs_after_it(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    x = queue_study(
        database,
        cluster=_ppu("ppu-b-8", 1, 8, rack="b"),
        release=PPU,
        variants=_variants(1),
        workloads=[_workload(tmp_path, 12, 0.5)],
    )
    y = queue_study(
        database,
        cluster=_ppu("ppu-b-16", 1, 16, rack="b"),
        release=PPU,
        variants=_variants(1),
        workloads=[_workload(tmp_path, 2, 0.2)],
    )
    report = _run(db_url, tmp_path, "restart")
    (run_x,) = runs_of(database, x.study_id)
    (run_y,) = runs_of(database, y.study_id)
    assert (run_x.status, run_x.attempt) == ("succeeded", 2)  # the hung dispatcher's attempt was reaped
    assert (run_y.status, run_y.attempt) == ("succeeded", 1)
    assert len(_visible(run_y)) == 16
    waits = report["waiting"][str(run_y.id)]
    assert any(f"held by run(s) {run_x.id}" in w for w in waits)  # it waited, saying for whom
    _nothing_held(database)


def test_a_busy_pool_queues_its_runs_and_does_not_block_another_pool(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    ppu = queue_study(
        database,
        cluster=_ppu("ppu-2x16", 2, 16),
        release=PPU,
        variants=_variants(3),
        workloads=[_workload(tmp_path, 6, 0.5)],  # 3 s each, longer than the 2 s placement timeout
    )
    gpu = queue_study(
        database,
        cluster=ClusterDef(
            name="gpu-1", accelerator="gpu", nodes=1, devices_per_node=1, labels={"pool": "gpu"}
        ),
        variants=_variants(1),
        workloads=[_workload(tmp_path, 2, 0.1)],
    )
    report = _run(db_url, tmp_path, "busy")
    runs = runs_of(database, ppu.study_id)
    (gpu_run,) = runs_of(database, gpu.study_id)
    assert [(r.status, r.attempt, r.error) for r in runs] == [("succeeded", 1, None)] * 3
    assert (gpu_run.status, gpu_run.error) == ("succeeded", None)
    # the GPU run queued behind the PPU runs ran while the PPU pool was busy with the first of them
    last = max(runs, key=lambda r: r.started_at)
    assert gpu_run.finished_at < last.started_at
    waited = [w for r in runs for w in report["waiting"].get(str(r.id), [])]
    assert any(w.startswith("waiting for 2 node(s) of pool ppu (") and "held by run(s) " in w for w in waited)
    _nothing_held(database)
