"""Exclusions and deletions in a real browser (both databases): an excluded run is struck through with
its reason on the run and study pages, and the audit entries show on the run and release pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import (
    auth,
    live_server,  # noqa: F401  (the fixture: a fresh server per database)
    make_token,
)
from tests.api.helpers import REF, RELEASE, result
from tests.api.test_studies import plan
from tests.support.live_server import LiveServer
from tests.web.conftest import Console
from tests.web.helpers import assert_no_console_errors, open_page, shoot

pytestmark = pytest.mark.browser

REASON = "node 17 was throttling"


def _line_through(page: Any, selector: str) -> bool:
    style = "el => getComputedStyle(el).textDecorationLine"
    return "line-through" in str(page.eval_on_selector(selector, style))


def test_excluded_run_is_struck_through_and_the_audit_shows(
    live_server: LiveServer,  # noqa: F811
    page: Any,
    console: Console,
    screenshots: Path,
    backend: str,
) -> None:
    page.set_default_timeout(60_000)  # the pages and plotly on a loaded 2-core machine
    admin = auth(make_token(live_server.database, "data-steward", "admin"))
    ci = auth(make_token(live_server.database, "web-ci", "submit"))
    with httpx.Client(base_url=live_server.api, timeout=30.0) as http:
        assert http.post("/releases", json=RELEASE, headers=admin).status_code == 201
        submitted = http.post("/results", json={"results": [result(repeat=0), result(repeat=1)]}, headers=ci)
        run_id, kept = submitted.json()["run_ids"]
        study = http.post("/studies", json=plan(repeats=1), headers=admin).json()
        assert http.post(f"/studies/{study['id']}/cancel", headers=admin).status_code == 200
        study_run = study["runs"][0]["id"]
        for rid in (run_id, study_run):
            r = http.post(f"/runs/{rid}/exclude", json={"reason": REASON}, headers=admin)
            assert r.status_code == 200, r.text

    open_page(page, f"{live_server.url}/runs/{run_id}")
    assert _line_through(page, "h1 .struck")
    assert REASON in page.inner_text("#run-excluded")
    row = page.inner_text("#exclusions tbody tr")
    assert "data-steward" in row and "excluded" in row and REASON in row
    shoot(page, screenshots, f"run-excluded-{backend}")
    open_page(page, f"{live_server.url}/runs/{kept}")
    assert page.locator("#run-excluded").count() == 0 and page.locator("h1 .struck").count() == 0

    open_page(page, f"{live_server.url}/studies/{study['id']}")
    cell = f'td.cell.excluded[data-run-id="{study_run}"]'
    assert _line_through(page, f"{cell} .cell-head a")
    assert REASON in page.inner_text(f"{cell} [data-exclusion]")

    open_page(page, f"{live_server.url}/releases/{REF}")
    changes = page.inner_text("#changes")
    assert f"excluded run #{run_id}" in changes and f"excluded run #{study_run}" in changes
    assert REASON in changes and "data-steward" in changes
    page.click(f'#changes a[href="/runs/{run_id}"]')
    page.wait_for_url(f"**/runs/{run_id}")

    with httpx.Client(base_url=live_server.api, timeout=30.0) as http:
        assert http.delete(f"/studies/{study['id']}", headers=admin).status_code == 200
    open_page(page, f"{live_server.url}/releases/{REF}")
    first = page.inner_text("#changes li:first-child")
    assert f"deleted study #{study['id']}" in first and "1 studies" in first
    shoot(page, screenshots, f"release-changes-{backend}")
    assert_no_console_errors(console)
