"""A node whose device tool fails: the attempt fails as infrastructure with the tool's output, and the
retry is kept off that node (real Ray nodes, a real ``ppu-smi`` stand-in on PATH, no mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.backend.dashboard.views.clusters import clusters_page
from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from tests.workers.conftest import queue_study, run_own_ray, runs_of

ROOT = Path(__file__).resolve().parents[2]

# Fails (exit 9, like a driver that is not loaded) on the node where it first runs, works elsewhere.
# Ray's workers carry their raylet's pid in RAY_RAYLET_PID: it tells the nodes apart.
PPU_SMI = """#!/bin/sh
bad="$(dirname "$0")/bad-node"
[ -f "$bad" ] || echo "$RAY_RAYLET_PID" > "$bad"
if [ "$(cat "$bad")" = "$RAY_RAYLET_PID" ]; then
  echo "ppu-smi: failed to initialize the PPU driver (error 9)"
  exit 9
fi
if [ "$1" = "-L" ]; then echo "PPU 0: PPU-X (UUID: PPU-aa)"; exit 0; fi
echo "0, PPU-aa, 1.2.0, 98304, 98000"
"""


def test_a_node_failing_preflight_is_reported_and_avoided(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ppu-smi").write_text(PPU_SMI)
    (bin_dir / "ppu-smi").chmod(0o755)
    ppu = ClusterDef(name="ppu-1x1", accelerator="ppu", nodes=1, devices_per_node=1)
    wl = WorkloadDef(name="where", runner="fake", runner_options={"node_dir": str(tmp_path / "nodes")})
    q = queue_study(database, cluster=ppu, variants=[VariantDef(name="A")], workloads=[wl])
    raylets = run_own_ray("preflight_nodes", db_url, str(tmp_path), str(bin_dir))["raylets"]
    bad = raylets[(bin_dir / "bad-node").read_text().strip()]

    (run,) = runs_of(database, q.study_id)
    assert (run.status, run.attempt) == ("succeeded", 2), run.error
    reason = run.provenance[f"excluded_node.{bad}"]
    assert reason.startswith("failed preflight: preflight failed on ")
    assert "exited with 9" in reason and "failed to initialize the PPU driver (error 9)" in reason
    # the retry ran on the other node
    (good,) = set(raylets.values()) - {bad}
    assert {p.read_text() for p in (tmp_path / "nodes").glob("rank*")} == {good}

    # the clusters page lists the node, with the run that excluded it
    with database.read() as s:
        view = next(c for c in clusters_page(s).clusters if c.definition.name == "ppu-1x1")
    assert [(n.node_id, n.run_id) for n in view.failed_preflight] == [(bad, run.id)]
