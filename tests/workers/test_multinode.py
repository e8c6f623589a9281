"""A multi-node run end to end on a real Ray of two nodes: placement group, rendezvous on node 0, one
node task per node with global ranks, and the placement group removed afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from tests.workers.conftest import queue_study, runs_of

ROOT = Path(__file__).resolve().parents[2]


def test_two_node_run_through_a_placement_group(database: Database, db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    two = ClusterDef(name="cpu-2x1", accelerator="cpu", nodes=2, devices_per_node=1)
    q = queue_study(
        database,
        cluster=two,
        variants=[VariantDef(name="A"), VariantDef(name="F", runner_options={"fail": True})],
        workloads=[WorkloadDef(name="fake", runner="fake", runner_options={"steps": 3})],
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.workers.two_nodes", db_url, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = {r.error is None: r for r in runs_of(database, q.study_id)}
    ok, failed = runs[True], runs[False]
    assert ok.status == "succeeded" and ok.attempt == 1
    assert ok.provenance["world"] == "2x1"  # rank 0 of a world of 2, one rank per node
    assert ok.provenance["ray_demand"] == "cluster 'cpu-2x1' needs 1 CPU on each of 2 node(s)"
    # a benchmark failure on the nodes is recorded as it is, not retried
    assert (failed.status, failed.failure_kind, failed.attempt) == ("failed", "benchmark", 1)
    assert failed.error == "the benchmark failed by itself"
    assert report["placement_groups"] and set(report["placement_groups"]) == {"REMOVED"}
