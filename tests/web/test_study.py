"""The study page in a real browser: live progress while real runs execute, and the cancel button.

The live test starts its own server with the in-process dispatcher (``run_dispatcher=True``) on a
fresh database, so it executes exactly the study it submits: tiny torch-llm runs on a local Ray,
with enough steps that progress is visible for a few seconds per run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.databases import DatabaseFactory
from tests.support.live_server import LiveServer, start_live_server
from tests.web import seed
from tests.web.conftest import Console, Site
from tests.web.helpers import assert_no_console_errors, open_page, shoot

pytestmark = pytest.mark.browser

TERMINAL = ("succeeded", "failed", "cancelled")
# "small" preset at 128 tokens x 4: about 0.1 s per step on one CPU thread, so 120 steps take about
# 12 s: progress is reported once a second and the page polls once a second, and with 40 steps a fresh
# clone's idle CI run once finished both runs between two polls (no part-way value seen).
LIVE_WORKLOAD = {
    "name": "tiny-live",
    "framework": "pytorch",
    "model": "small",
    "runner": "torch-llm",
    "seq_len": 128,
    "micro_batch": 4,
    "precision": "fp32",
    "warmup_steps": 1,
    "measured_steps": 120,
}
LIVE_VARIANTS = [
    {"name": "Base", "position": 0},
    {"name": "CkptOpt", "position": 1, "factors": ["ckpt_opt"], "env": {"CHECKPOINT_OPTIMIZATION": "true"}},
]
LOCAL_CPU = {"name": "local-cpu", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1}


@pytest.fixture(scope="module")
def live_study(db_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    ray = pytest.importorskip("ray")
    was_connected = ray.is_initialized()
    server: LiveServer = start_live_server(
        db_factory.new("sqlite"),
        settings={
            "data_dir": str(tmp_path_factory.mktemp("live-study")),
            "dispatcher_poll_s": 0.2,
            "ray_num_cpus": 2,
            "max_concurrent_runs": 2,
            "run_timeout_s": 240.0,
        },
        run_dispatcher=True,
        ready_timeout_s=120.0,
    )
    try:
        token = seed.make_token(server.database, "live-admin", "admin")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.api, timeout=60.0, headers=headers) as client:
            release = {"image": "training-cpu-pytorch", "tag": "26.02", "platform": "gpu"}
            assert client.post("/releases", json=release).status_code == 201
            plan = {
                "name": "live progress",
                "release": "training-cpu-pytorch:26.02",
                "cluster": LOCAL_CPU,
                "variants": LIVE_VARIANTS,
                "workloads": [LIVE_WORKLOAD],
                "repeats": 1,
                "order_seed": 3,
            }
            response = client.post("/studies", json=plan)
            assert response.status_code == 201, response.text
            yield server, response.json()["id"]
    finally:
        server.stop()
        if not was_connected and ray.is_initialized():
            ray.shutdown()  # leave the process as we found it for other suites' Ray fixtures


PROGRESS_JS = """
() => Array.from(document.querySelectorAll('[data-run-id]')).map(c => ({
  id: c.dataset.runId,
  status: c.querySelector('[data-status]').textContent.trim(),
  value: Number(c.querySelector('.progress').getAttribute('aria-valuenow')),
  meta: c.querySelector('[data-meta]').textContent.trim(),
}))
"""


def test_study_progress_updates_while_runs_execute(
    page: Any, live_study: tuple, console: Console, screenshots: Path
) -> None:
    server, study_id = live_study
    open_page(page, f"{server.url}/studies/{study_id}")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    seen: dict[str, set[float]] = {}
    statuses: set[str] = set()
    shot = False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        cells = page.evaluate(PROGRESS_JS)
        for c in cells:
            statuses.add(c["status"])
            if c["status"] == "running" and 0 < c["value"] < 100:
                seen.setdefault(c["id"], set()).add(c["value"])
                if not shot and len(seen[c["id"]]) >= 2:
                    assert c["meta"].startswith("step "), c
                    shoot(page, screenshots, "study-live")
                    shot = True
        if page.get_attribute("#study", "data-status") in TERMINAL:
            break
        page.wait_for_timeout(250)
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
    assert page.get_attribute("#study", "data-status") == "succeeded", page.evaluate(PROGRESS_JS)
    # A run was seen part-way and then at 100% in the same document: the bar moved in place. (Two
    # partial values are not required: on a loaded machine progress reports may come seconds apart,
    # and a short run can finish between two of them.)
    assert seen, statuses
    assert "running" in statuses
    cells = page.evaluate(PROGRESS_JS)
    assert [c["status"] for c in cells] == ["succeeded"] * len(LIVE_VARIANTS)
    assert all(c["value"] == 100 for c in cells)
    assert page.inner_text("#study-counts") == f"{len(cells)}/{len(cells)} runs finished"
    assert page.inner_text("#live-note") == "finished"  # polling stopped
    shoot(page, screenshots, "study-finished")
    assert_no_console_errors(console)

    # The clusters page of this process sees Ray (the dispatcher connected it) and its resources.
    open_page(page, f"{server.url}/clusters")
    assert page.get_attribute("[data-ray]", "data-ray") == "connected"
    pool = page.inner_text('#clusters tr[data-cluster="local-cpu"]')
    assert re.search(r"1 node: CPU \d+/2\b", pool), pool  # free/total CPUs of the local Ray node
    shoot(page, screenshots, "clusters-ray")
    assert_no_console_errors(console)


def test_cancel_button_needs_an_admin_token(page: Any, site: Site, console: Console) -> None:
    study_id = site.data.cancel_study_id
    open_page(page, f"{site.url}/studies/{study_id}")
    answers = iter(["not-a-token", site.data.admin_token])
    page.on("dialog", lambda dialog: dialog.accept(next(answers)))
    console.expected.append("401")  # the refused cancel call is logged by Chromium itself

    page.click("#cancel-study")
    page.wait_for_selector("#study-error:not([hidden])")
    assert "the token is unknown or revoked" in page.inner_text("#study-error")
    assert page.get_attribute("#study", "data-status") != "cancelled"

    page.click("#cancel-study")
    page.wait_for_function("() => document.querySelector('#study').dataset.status === 'cancelled'")
    page.wait_for_function("() => document.querySelector('#live-note').textContent === 'finished'")
    statuses = page.eval_on_selector_all("[data-run-id] [data-status]", "bs => bs.map(b => b.textContent)")
    assert statuses and set(statuses) == {"cancelled"}
    assert page.is_hidden("#study-error")
    assert page.is_hidden("#cancel-study")
    assert_no_console_errors(console)
