"""A run's log files per attempt over HTTP: every attempt listed with its outcome and its own files (a retry
never hides the failed attempt's), the earlier single-folder layout still readable, a file picked by
attempt, and bad picks refused by name. The files are laid out as the dispatcher keeps them (the real
retry path is tests/workers/test_faults.py::test_crashed_worker_is_retried_with_next_attempt)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from ablate.backend.db.models import Run
from ablate.workers.dispatch import logs
from tests.api.conftest import auth, make_token
from tests.api.helpers import assert_problem, create_release, result
from tests.support.live_server import LiveServer, start_live_server


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    live = start_live_server(db_url, settings={"data_dir": str(tmp_path)})
    try:
        yield live
    finally:
        live.stop()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_attempt_keeps_its_logs_and_outcome(server: LiveServer) -> None:
    admin_token = make_token(server.database, "adm", "admin")
    with httpx.Client(base_url=server.api, timeout=30.0, headers=auth(admin_token)) as http:
        create_release(http)
        run_id = http.post("/results", json={"results": [result(status="failed", metrics={}, error="OOM")]})
        run_id = run_id.json()["run_ids"][0]
        # the run is on its third attempt: attempt 1 was retried (noted), attempt 2's dispatcher was lost
        with server.database.transaction() as s:
            s.execute(update(Run).where(Run.id == run_id).values(attempt=3))
        root = server.settings.log_dir / f"run-{run_id}"
        _write(root / "node0.log", "old layout\n")
        _write(root / "attempt-1" / "node0.log", "first attempt\n")
        logs.note_outcome(server.settings.log_dir, run_id, 1, "retried", "attempt 1 failed (node lost)")
        _write(root / "attempt-3" / "node0.log", "third attempt node 0\n")
        _write(root / "attempt-3" / "node1.log", "third attempt node 1\n")
        _write(root / "attempt-3" / "notes.txt", "never listed\n")

        body = http.get(f"/runs/{run_id}/logs").json()
        got = [
            (a["attempt"], a["current"], a["outcome"], [f["name"] for f in a["files"]])
            for a in body["attempts"]
        ]
        assert got == [
            (0, False, "unknown", ["node0.log"]),
            (1, False, "retried", ["node0.log"]),
            (2, False, "superseded", []),
            (3, True, "failed", ["node0.log", "node1.log"]),
        ]
        reasons = [a["reason"] for a in body["attempts"]]
        assert "before each attempt had its own log folder" in reasons[0]
        assert reasons[1] == "attempt 1 failed (node lost)"
        assert "no outcome was recorded" in reasons[2] and "attempt 3 followed" in reasons[2]
        assert reasons[3] == "OOM"
        assert [(f["attempt"], f["name"]) for f in body["items"]] == [
            (0, "node0.log"), (1, "node0.log"), (3, "node0.log"), (3, "node1.log")
        ]  # fmt: skip
        texts = [http.get(f["url"].removeprefix("/api/v1")).text for f in body["items"]]
        assert texts == [
            "old layout\n",
            "first attempt\n",
            "third attempt node 0\n",
            "third attempt node 1\n",
        ]
        # no attempt named: the newest attempt that has the file
        assert http.get(f"/runs/{run_id}/logs/node0.log").text == "third attempt node 0\n"
        assert http.get(f"/runs/{run_id}/logs/node0.log", params={"attempt": 1}).text == "first attempt\n"
        body = assert_problem(
            http.get(f"/runs/{run_id}/logs/node0.log", params={"attempt": 2}), 404, loc="name"
        )
        assert "no log file 'node0.log' in attempt 2" in body["detail"]
        assert_problem(
            http.get(f"/runs/{run_id}/logs/node0.log", params={"attempt": -1}), 422, loc="query.attempt"
        )
        assert_problem(http.get(f"/runs/{run_id}/logs/notes.txt", params={"attempt": 3}), 404, loc="name")
        assert_problem(http.get(f"/runs/{run_id}/logs/outcome.json", params={"attempt": 1}), 404, loc="name")

        # the run page lists every attempt with its outcome and links each file of each attempt
        page = http.get(f"{server.url}/runs/{run_id}").text
        for attempt, outcome in (
            ("0", "unknown"),
            ("1", "retried"),
            ("2", "superseded"),
            ("3", "failed"),
        ):
            assert f'data-attempt="{attempt}" data-outcome="{outcome}"' in page
        assert "attempt 1 failed (node lost)" in page and "No log files kept for this attempt." in page
        assert f'href="/runs/{run_id}/logs/node0.log?attempt=1"' in page
        assert f'href="/runs/{run_id}/logs/node0.log?attempt=0"' in page  # the earlier layout's file
        picked = http.get(f"{server.url}/runs/{run_id}/logs/node1.log", params={"attempt": 3})
        assert picked.text == "third attempt node 1\n"
