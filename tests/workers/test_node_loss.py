"""A Ray node lost in the middle of a run, on a real local Ray of several nodes: the attempt fails as
infrastructure naming the dead node, the retry avoids that node (Ray marks it dead only seconds later),
and the next study's runs follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from tests.workers.conftest import CPU1, FAKE, queue_study, run_own_ray, runs_of


def test_a_node_lost_mid_run_is_named_avoided_and_the_queue_moves_on(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    node_dir, release = tmp_path / "nodes", tmp_path / "release"
    two = ClusterDef(name="cpu-2x1", accelerator="cpu", nodes=2, devices_per_node=1)
    held = WorkloadDef(
        name="held",
        runner="fake",
        runner_options={"node_dir": str(node_dir), "hold_until": str(release)},
    )
    first = queue_study(database, cluster=two, variants=[VariantDef(name="A")], workloads=[held])
    second = queue_study(database, cluster=CPU1, variants=[VariantDef(name="A")], workloads=[FAKE], repeats=2)
    killed = run_own_ray("node_loss", db_url, str(tmp_path), str(node_dir), str(release))["killed"]

    (run,) = runs_of(database, first.study_id)
    assert (run.status, run.attempt, run.error) == ("succeeded", 2, None)
    # the first attempt's reason is kept with the run, naming the node
    reason = run.provenance[f"excluded_node.{killed}"]
    assert reason.startswith(f"the Ray node {killed} (") and "died" in reason
    # the second attempt ran on the two nodes left, not on the dead one
    second_attempt = {p.read_text() for p in node_dir.glob("rank*")} - {killed}
    assert len(second_attempt) >= 2
    assert [r.status for r in runs_of(database, second.study_id)] == ["succeeded", "succeeded"]
