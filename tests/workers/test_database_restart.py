"""The in-process dispatcher of ``ablate serve`` outlives its database (issue 30): a PostgreSQL of
the test's own is stopped under a running study and started again. While it is down the API and the
dashboard answer 503 with Retry-After (not 500) and /readyz says the database is unreachable; once
it is back the dispatcher restarts on its own, /readyz says so, and the study finishes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from ablate.backend.api.app import create_app
from ablate.backend.db import migrate
from ablate.backend.db.database import Database
from ablate.backend.db.models import Study
from ablate.backend.db.session import make_engine
from ablate.backend.schemas.catalog import ClusterDef, VariantDef, WorkloadDef
from ablate.backend.server import bind_socket, start_background_server
from tests.support.own_postgres import OwnPostgres, server_bin
from tests.workers.conftest import make_settings, queue_study
from tests.workers.test_faults import wait_for

# A benchmark of about a second: the restart falls between runs, and in the middle of some.
STEPS = (
    'python3 -c "import json, time; time.sleep(0.8); '
    "[print(json.dumps({'step': i, 'throughput_tokens_per_s': 1000.0 + i})) for i in (1, 2)]\""
)
CPU = ClusterDef(name="cpu-restart", accelerator="cpu", nodes=1, devices_per_node=1)
WORKLOAD = WorkloadDef(
    name="restart-cmd", runner="command", parser="jsonl", warmup_steps=0, runner_options={"command": STEPS}
)


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    bin_dir = server_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
    pg = OwnPostgres(bin_dir)
    try:
        pg.start()
        engine = make_engine(pg.url)
        migrate.upgrade(engine)
        engine.dispose()
        yield pg
    finally:
        pg.close()


def _study_status(database: Database, study_id: int) -> str | None:
    try:
        with database.read() as session:
            return session.scalar(select(Study.status).where(Study.id == study_id))
    except Exception:  # the database is down: not yet
        return None


def test_the_dispatcher_restarts_after_the_database_does(
    ray_local: str, own_postgres: OwnPostgres, tmp_path: Path
) -> None:
    database = Database.from_url(own_postgres.url)
    q = queue_study(
        database, cluster=CPU, variants=[VariantDef(name="restart")], workloads=[WORKLOAD], repeats=8
    )
    settings = make_settings(tmp_path, lease_s=30.0, max_concurrent_runs=2)
    app = create_app(settings, database, run_dispatcher=True)
    server = start_background_server(app, bind_socket("127.0.0.1", 0))
    web = httpx.Client(base_url=server.url, timeout=30)
    try:
        ready = web.get("/readyz")
        assert ready.status_code == 200 and ready.json()["dispatcher"]["state"] == "running", ready.text

        def succeeded() -> int:
            runs = web.get(f"/api/v1/studies/{q.study_id}").json()["runs"]
            return sum(r["status"] == "succeeded" for r in runs)

        wait_for(lambda: succeeded() >= 2, 180, "two runs to succeed")
        own_postgres.stop()
        down = web.get("/api/v1/runs")
        assert down.status_code == 503, down.text
        assert down.headers["retry-after"].isdigit(), down.headers
        assert down.headers["content-type"].startswith("application/problem+json")
        assert "database" in down.json()["detail"]
        page = web.get("/")
        assert page.status_code == 503 and page.headers["retry-after"].isdigit(), page.status_code
        assert "Traceback" not in page.text
        probe = web.get("/readyz")
        assert probe.status_code == 503, probe.text
        assert probe.json()["database"]["state"] == "unreachable", probe.text
        # The dispatcher meets the outage on its next database call and says so.
        wait_for(lambda: web.get("/readyz").json()["dispatcher"]["state"] == "restarting", 60, "the restart")
        time.sleep(2)  # an outage of a few seconds: several failed attempts, with backoff
        own_postgres.start()
        wait_for(lambda: _study_status(database, q.study_id) == "succeeded", 300, "the study to finish")
        statuses = [r["status"] for r in web.get(f"/api/v1/studies/{q.study_id}").json()["runs"]]
        assert statuses == ["succeeded"] * 8, statuses
        after = web.get("/readyz")
        body = after.json()
        assert after.status_code == 200, after.text
        assert body["database"]["state"] == "ok" and body["dispatcher"]["state"] == "running", body
        assert body["dispatcher"]["restarts"] >= 1 and body["dispatcher"]["last_error"], json.dumps(body)
    finally:
        web.close()
        server.stop()
        database.dispose()
