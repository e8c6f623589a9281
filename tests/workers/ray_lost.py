"""Kill the raylet of the dispatcher's own local Ray while a study runs. Run as ``python -m
tests.workers.ray_lost DB_URL DATA_DIR`` by test_ray_lost.py: this process starts the local Ray (as
``ablate serve`` does, ``ABLATE_RAY_ADDRESS`` empty) through the supervised dispatcher, so the Ray it
kills is its own, never the test session's. Once a run of the study the test queued succeeded, the
raylet is killed (SIGKILL) and a second study is queued; the script watches the supervisor's status and
the queued runs' errors until every run ended, and prints what it saw as JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from ablate.backend.api.routes import health
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.schemas.catalog import VariantDef, WorkloadDef
from ablate.workers.dispatch.supervisor import SupervisedDispatcher
from tests.workers.conftest import CPU1, make_settings, queue_study
from tests.workers.fakes import FakeRunner

DEADLINE_S = 240.0  # a loaded machine: Ray's own start takes seconds, twice here


def _runs(database: Database) -> list[tuple[int, str, str | None]]:
    with database.read() as s:
        return [(r.id, r.status, r.error) for r in s.execute(select(Run.id, Run.status, Run.error))]


def main(db_url: str, data_dir: str) -> None:
    database = Database.from_url(db_url)
    settings = make_settings(Path(data_dir), ray_num_cpus=2, max_concurrent_runs=2, lease_s=10.0)
    supervisor = SupervisedDispatcher(settings, database, runners={"fake": FakeRunner})
    supervisor.start()
    app = FastAPI()  # /readyz as `ablate serve` answers it, on this process's supervisor
    app.include_router(health.router)
    app.state.database, app.state.dispatcher = database, supervisor
    probe = TestClient(app)
    seen: dict[str, Any] = {"before": dataclasses.asdict(supervisor.status())}
    try:
        end = time.monotonic() + DEADLINE_S
        while not any(status == "succeeded" for _, status, _ in _runs(database)):
            assert time.monotonic() < end, "no run succeeded before the raylet was killed"
            time.sleep(0.1)
        raylets = [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]
        assert len(raylets) == 1, f"expected this process's one raylet, found {raylets}"
        os.kill(raylets[0].pid, signal.SIGKILL)
        slow = WorkloadDef(name="fake-slow", runner="fake", runner_options={"steps": 3, "step_s": 0.3})
        seen["second_study"] = queue_study(
            database, cluster=CPU1, variants=[VariantDef(name="A"), VariantDef(name="B")], workloads=[slow]
        ).study_id
        waiting: set[str] = set()
        while True:
            status = supervisor.status()
            if status.ray == "lost" and "lost" not in seen:
                seen["lost"] = dataclasses.asdict(status)
                ready = probe.get("/readyz")
                seen["readyz_lost"] = [ready.status_code, ready.json()]
            runs = _runs(database)
            waiting |= {e for _, st, e in runs if st == "queued" and e and e.startswith("waiting for Ray")}
            ended = all(st in ("succeeded", "failed") for _, st, _ in runs)
            if "lost" in seen and status.ray == "connected" and ended:
                break
            assert time.monotonic() < end, f"not done within {DEADLINE_S:g} s: {status}, {runs}"
            time.sleep(0.1)
        seen["waiting"] = sorted(waiting)
        seen["after"] = dataclasses.asdict(supervisor.status())
        ready = probe.get("/readyz")
        seen["readyz_after"] = [ready.status_code, ready.json()]
        seen["runs"] = _runs(database)
    finally:
        supervisor.stop()
        database.dispose()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:3])
