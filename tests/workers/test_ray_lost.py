"""Ray lost (issue 30): the raylet of the dispatcher's local Ray is killed under a running study. Nothing
is failed as unplaceable; the queued runs say they wait for Ray; the supervised dispatcher starts its
local Ray again and every run, of the study running then and of one queued after the kill, succeeds.
The Ray killed is the script's own (see ray_lost.py), never the test session's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import VariantDef, WorkloadDef
from tests.workers.conftest import CPU1, queue_study, run_own_ray


def test_queued_runs_wait_for_a_killed_raylet_and_finish_once_ray_is_back(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    slow = WorkloadDef(name="fake-slow", runner="fake", runner_options={"steps": 3, "step_s": 0.3})
    variants = [VariantDef(name=n) for n in ("A", "B", "C")]
    queue_study(database, cluster=CPU1, variants=variants, workloads=[slow], repeats=2)
    seen = run_own_ray("ray_lost", db_url, str(tmp_path), timeout_s=400.0)

    lost = seen["lost"]
    assert lost["state"] == "restarting" and lost["ray_lost"] == "the local Ray's raylet died", lost
    assert any(e.startswith("waiting for Ray: the local Ray's raylet died") for e in seen["waiting"]), seen
    code, body = seen["readyz_lost"]
    assert code == 503 and body["dispatcher"]["ray"] == "lost", body
    assert body["detail"].startswith("the dispatcher's Ray is lost (the local Ray's raylet died"), body
    code, body = seen["readyz_after"]
    assert code == 200 and body["dispatcher"]["ray"] == "connected", body
    after = seen["after"]
    assert (after["state"], after["ray"], after["ray_lost"]) == ("running", "connected", None), after
    assert after["ray_address"] and after["ray_address"] != seen["before"]["ray_address"]  # a fresh Ray
    assert len(seen["runs"]) == 8
    assert [(status, error) for _, status, error in seen["runs"]] == [("succeeded", None)] * 8, seen["runs"]
