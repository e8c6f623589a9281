"""Failures in sight (issue 31): a study cell says why its run failed (not only in a tooltip), the
release page says a reason many cells share once with its count, and the home card of a release
whose runs all failed says so and why, instead of "No speed-up yet"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from ablate.backend.db.models import Run
from ablate.backend.domain.runner import RunResult
from ablate.backend.services.ingest import FinishedRun, record_run_results
from tests.support.live_server import LiveServer, start_live_server
from tests.web import seed
from tests.web.conftest import Console
from tests.web.helpers import assert_no_console_errors, open_page, shoot

pytestmark = pytest.mark.browser

REASON = "unplaceable: no node of pool gpu has 8 free GPU (cluster gpu-1x8 has 1 node)"
CLUSTER = {"name": "gpu-1x8", "accelerator": "gpu", "nodes": 1, "devices_per_node": 8}
WORKLOADS = [{"name": f"w{i}", "framework": "pytorch", "model": "llama3-8b"} for i in range(3)]


@pytest.fixture(scope="module")
def failing(db_factory: Any) -> Iterator[tuple[LiveServer, int]]:
    server = start_live_server(db_factory.new("sqlite"))
    try:
        token = seed.make_token(server.database, "fail-admin", "admin")
        with httpx.Client(base_url=server.api, timeout=60, headers={"Authorization": f"Bearer {token}"}) as c:
            assert (
                c.post("/releases", json={"image": "img-f", "tag": "1", "platform": "gpu"}).status_code == 201
            )
            plan = {
                "name": "all fail",
                "release": "img-f:1",
                "cluster": CLUSTER,
                "variants": [{"name": "Base", "position": 0}, {"name": "Opt", "position": 1}],
                "workloads": WORKLOADS,
                "repeats": 2,
            }
            response = c.post("/studies", json=plan)
            assert response.status_code == 201, response.text
            study_id = response.json()["id"]
        # The dispatcher's own way to finish runs (no dispatcher runs here): every run failed alike.
        with server.database.transaction() as session:
            runs = session.scalars(select(Run).where(Run.study_id == study_id)).all()
            record_run_results(
                session, [FinishedRun(run, RunResult.failed(REASON, "infrastructure")) for run in runs]
            )
        yield server, study_id
    finally:
        server.stop()


def test_failures_are_in_sight(
    page: Any, failing: tuple[LiveServer, int], console: Console, screenshots: Path
) -> None:
    server, study_id = failing
    runs = 2 * len(WORKLOADS) * 2
    open_page(page, f"{server.url}/studies/{study_id}")
    reasons = page.eval_on_selector_all(
        "[data-reason]:not([hidden])", "rs => rs.map(r => r.textContent.trim())"
    )
    assert reasons == [f"infrastructure: {REASON}"] * runs
    shoot(page, screenshots, "study-failed")

    open_page(page, f"{server.url}/releases/img-f:1")
    missing = page.inner_text("#missing")
    assert missing.count(REASON) == 1, missing  # said once, counted
    assert f"{runs} runs failed (infrastructure): {REASON}" in missing

    open_page(page, server.url + "/")
    card = page.inner_text('.family[data-image="img-f"]')
    assert f"None of its {runs} runs succeeded; {runs} failed (infrastructure): {REASON}" in card, card
    assert "No speed-up yet" not in card
    assert_no_console_errors(console)
