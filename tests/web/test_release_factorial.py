"""The release page of a factorial release (the demo's 2x2 design): factor effects with intervals,
chart and table, instead of the ladder waterfall and shares; a ladder release keeps its ladder view.
Served by the real app over HTTP on both databases; no browser needed for the markup."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from ablate.backend.config import Settings
from ablate.backend.dashboard.filters import Filters
from ablate.backend.dashboard.views.release import release_page
from ablate.backend.db.database import Database
from tests.reports import seed as ladder_seed
from tests.services.test_comparison_factorial import REF, TPUT, WORKLOADS
from tests.services.test_comparison_factorial import _seed as seed_factorial
from tests.support.live_server import start_live_server
from tests.web.conftest import Console
from tests.web.helpers import assert_no_console_errors, chart_state, open_page, shoot


def test_factorial_release_shows_effects_not_a_waterfall(db_url: str, database: Database) -> None:
    seed_factorial(database)
    with database.read() as session:
        page = release_page(session, REF, Filters(), Settings(database_url=db_url))
    (section,) = page.sections
    assert [c.kind for c in section.factorial_charts] == ["factorial"]
    assert section.factorial_charts[0].traces == len(WORKLOADS)  # one trace per workload
    assert all(t.waterfall_html is None and not t.ladder for t in section.tables)
    tables = {t.workload: t for t in section.factorial_tables}
    assert set(tables) == set(WORKLOADS) and all(t.metric == TPUT for t in tables.values())
    rows = {r.name: r for r in tables["torch-llm-tiny"].rows}
    assert [r.kind for r in rows.values()] == ["main effect", "main effect", "interaction"]
    # The seeded synergy is x1.04 at full size; its interval is shown with it.
    both = rows["ckpt_opt \u00d7 compiler_opt"]
    assert abs(both.factor - 1.04) < 1e-9 and both.low < both.factor < both.high
    assert rows["compiler_opt"].factor > 1.2 and rows["compiler_opt"].significant
    assert rows["compiler_opt"].method.startswith("t-interval, welch-satterthwaite")

    with start_live_server(db_url) as server, httpx.Client(base_url=server.url, timeout=30.0) as client:
        html = client.get(f"/releases/{REF}").text
    assert 'data-chart="factorial"' in html and 'data-chart="waterfall"' not in html
    assert "2x2 factorial (ckpt_opt x compiler_opt)" in html
    effects = re.findall(r'<tr data-effect="([^"]+)" data-kind="([^"]+)"', html)
    assert ("ckpt_opt \u00d7 compiler_opt", "interaction") in effects
    assert len(effects) == 3 * len(WORKLOADS)
    assert "Share of gain" not in html and "Step vs reference rung" not in html


def test_ladder_release_keeps_the_ladder_view(db_url: str, database: Database) -> None:
    ladder_seed.seed_standard(database)
    ref = f"{ladder_seed.IMAGE}:25.12"
    with database.read() as session:
        page = release_page(session, ref, Filters(), Settings(database_url=db_url))
    (section,) = page.sections
    assert section.factorial_tables == [] and section.factorial_charts == []
    assert all(t.ladder and t.waterfall_html for t in section.tables)
    last = section.tables[0].rows[-1]
    assert last.step_reference == ladder_seed.VARIANTS[-2] and last.skipped == ()
    assert last.q_value is not None and last.q_value >= last.p_value
    with start_live_server(db_url) as server, httpx.Client(base_url=server.url, timeout=30.0) as client:
        html = client.get(f"/releases/{ref}").text
    assert 'data-chart="waterfall"' in html and 'data-chart="factorial"' not in html
    assert "Step vs reference rung" in html and f"vs {ladder_seed.VARIANTS[-2]}" in html


@pytest.mark.browser
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_factorial_release_page_renders_in_a_browser(
    db_url: str, database: Database, page: Any, console: Console, screenshots: Path
) -> None:
    seed_factorial(database)
    with start_live_server(db_url) as server:
        open_page(page, f"{server.url}/releases/{REF}")
        states = {s["kind"]: s for s in chart_state(page)}
        assert "waterfall" not in states
        factorial = states["factorial"]
        assert factorial["rendered"] and factorial["hasSvg"] and factorial["data"] == len(WORKLOADS)
        assert factorial["svgTraces"] == factorial["data"]
        table = page.locator('table.factorial-effects[data-workload="torch-llm-tiny"]')
        cell = table.locator('tr[data-kind="interaction"] td').nth(2).inner_text()
        assert cell.startswith("1.04\u00d7 [") and cell.endswith("]"), cell
        shoot(page, screenshots, "release-factorial")
    assert_no_console_errors(console)
