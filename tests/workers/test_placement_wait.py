"""A placement group that cannot be placed waits at most ABLATE_PLACEMENT_TIMEOUT_S, not the run's
timeout: the run fails naming why, and the runs queued behind it go on (real local Ray of two nodes,
one of them held by other work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ClusterDef, VariantDef
from tests.workers.conftest import CPU1, FAKE, queue_study, run_own_ray, runs_of


def test_an_unplaced_placement_group_fails_after_the_placement_timeout(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    two = ClusterDef(name="cpu-2x1", accelerator="cpu", nodes=2, devices_per_node=1)
    waiting = queue_study(database, cluster=two, variants=[VariantDef(name="A")], workloads=[FAKE])
    after = queue_study(database, cluster=CPU1, variants=[VariantDef(name="A")], workloads=[FAKE])
    run_own_ray("placement_wait", db_url, str(tmp_path))

    (run,) = runs_of(database, waiting.study_id)
    assert (run.status, run.failure_kind, run.attempt) == ("failed", "infrastructure", 1)
    assert run.error == (
        "not placed within 3 s (ABLATE_PLACEMENT_TIMEOUT_S): cluster 'cpu-2x1' needs 1 CPU on each of 2 "
        "node(s); enough alive nodes have these resources, but not free at the same time (held by other work)"
    )
    assert [r.status for r in runs_of(database, after.study_id)] == ["succeeded"]
