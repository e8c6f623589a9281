"""`ablate serve`'s in-process dispatcher: started and stopped by the app's lifespan."""

from __future__ import annotations

from pathlib import Path

import httpx

from ablate.backend.api.app import create_app
from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import VariantDef, WorkloadDef
from ablate.backend.server import bind_socket, start_background_server
from tests.workers.conftest import CPU1, make_settings, queue_study, runs_of
from tests.workers.test_faults import wait_for

TINY = WorkloadDef(name="tiny-serve", model="tiny", runner="torch-llm", seq_len=16, micro_batch=1,
                   precision="fp32", warmup_steps=1, measured_steps=1)  # fmt: skip


def test_lifespan_runs_a_dispatcher(ray_local: str, database: Database, tmp_path: Path) -> None:
    q = queue_study(database, cluster=CPU1, variants=[VariantDef(name="eager")], workloads=[TINY])
    app = create_app(make_settings(tmp_path), database, run_dispatcher=True)
    server = start_background_server(app, bind_socket("127.0.0.1", 0))  # lifespan on, real HTTP
    try:
        d = app.state.dispatcher
        assert d is not None and d.thread_alive
        wait_for(lambda: runs_of(database, q.study_id)[0].status == "succeeded", 120, "the run")
        body = httpx.get(f"{server.url}/api/v1/studies/{q.study_id}", timeout=30).json()
        assert body["status"] == "succeeded" and body["runs"][0]["progress"] == 1.0
    finally:
        server.stop()
    assert not server.alive and not d.thread_alive  # stopped on shutdown


def test_no_dispatcher_when_switched_off(database: Database, tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), database, run_dispatcher=False)
    server = start_background_server(app, bind_socket("127.0.0.1", 0))
    try:
        assert app.state.dispatcher is None
    finally:
        server.stop()
