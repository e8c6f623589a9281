"""Every dashboard page in headless Chromium against a live server with real, seeded data."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.live_server import start_live_server
from tests.web import seed
from tests.web.conftest import Console, Site
from tests.web.helpers import assert_no_console_errors, chart_state, open_page, shoot

pytestmark = pytest.mark.browser

N_VARIANTS = len(seed.LADDER)


def pages(site: Site) -> dict[str, str]:
    """Screenshot name -> path of every page with data."""
    d = site.data
    old_base = ",".join(map(str, d.run_ids[seed.OLD][: seed.REPEATS]))
    new_base = ",".join(map(str, d.run_ids[seed.NEW][: seed.REPEATS]))
    return {
        "home": "/",
        "releases": "/releases",
        "release": f"/releases/{seed.NEW}",
        "release-ppu": f"/releases/{seed.PPU}",
        "compare": f"/compare?a={quote(seed.OLD)}&b={quote(seed.NEW)}",
        "compare-runs": f"/compare?baseline_runs={old_base}&contender_runs={new_base}",
        "studies": "/studies",
        "study": f"/studies/{d.queued_study_id}",
        "run": f"/runs/{d.series_run_id}",
        "run-failed": f"/runs/{d.failed_run_id}",
        "clusters": "/clusters",
    }


PAGE_NAMES = [
    "home",
    "releases",
    "release",
    "release-ppu",
    "compare",
    "compare-runs",
    "studies",
    "study",
    "run",
    "run-failed",
    "clusters",
]


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_page_loads_without_console_errors(
    page: Any, site: Site, console: Console, screenshots: Path, name: str
) -> None:
    open_page(page, site.url + pages(site)[name])
    assert page.locator("h1").first.inner_text().strip()
    assert page.locator("nav a.active").count() == 1
    for state in chart_state(page):
        assert state["rendered"] and state["hasSvg"], state
    shoot(page, screenshots, name)
    assert_no_console_errors(console)


def test_pages_load_on_postgresql(page: Any, pg_site: Site, console: Console) -> None:
    for name, path in pages(pg_site).items():
        open_page(page, pg_site.url + path)
        assert page.locator("h1").first.inner_text().strip(), name
        for state in chart_state(page):
            assert state["rendered"] and state["hasSvg"], (name, state)
    assert_no_console_errors(console)


def test_release_charts_render_with_expected_traces(page: Any, site: Site, console: Console) -> None:
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    states = chart_state(page)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for s in states:
        by_kind.setdefault(s["kind"], []).append(s)
    # One cluster: one ablation chart and one memory chart, a bar trace per variant, then its runs'
    # points (tests/web/test_charts.py looks at them).
    assert [s["data"] for s in by_kind["ablation"]] == [2 * N_VARIANTS]
    assert [s["data"] for s in by_kind["memory"]] == [2 * N_VARIANTS]
    assert by_kind["ablation"][0]["names"] == [v[0] for v in seed.LADDER] * 2
    # One waterfall per workload: Base, one bar per further rung, and the total.
    assert [s["data"] for s in by_kind["waterfall"]] == [N_VARIANTS + 1] * len(seed.WORKLOADS)
    for s in states:
        if s["expected"] is not None:
            assert s["data"] == s["expected"], s
        assert s["svgTraces"] == s["data"], s  # every trace is drawn in the SVG
    assert_no_console_errors(console)


def test_release_tables_show_intervals_and_badges(page: Any, site: Site, console: Console) -> None:
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    workload, variant = seed.NOISY
    noisy_row = page.locator(
        f'table.ladder[data-workload="{workload}"][data-metric="throughput_tokens_per_s"] '
        f'tr[data-variant="{variant}"]'
    )
    assert noisy_row.locator(".badge-noisy").count() == 1
    # Speed-ups are shown with their interval, e.g. "1.22x [1.21, 1.23]" with a multiplication sign.
    last = page.locator('table.ladder[data-metric="throughput_tokens_per_s"] tbody tr').last
    text = last.locator("td").nth(3).inner_text()
    assert "\u00d7 [" in text and text.endswith("]"), text
    # The deliberate regression of 25.12 is flagged against 25.09.
    regressed = page.locator('#deltas tr[data-verdict="regressed"]')
    assert regressed.count() >= 1
    assert seed.REGRESSED[0] in regressed.first.inner_text()
    # Manifest diff against the previous release, and the known issue of 25.12.
    assert page.locator('#manifest tr[data-change="upgraded"]').count() >= 2
    assert page.locator('#manifest tr[data-change="added"]').count() == 1
    assert "torch.compile may recompile" in page.locator("#known-issues").inner_text()
    assert_no_console_errors(console)


def test_filter_in_query_string_changes_what_is_shown(page: Any, site: Site, console: Console) -> None:
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    workloads = [w["name"] for w in seed.WORKLOADS]
    assert chart_state(page)[0]["x"] == workloads
    with page.expect_navigation():
        page.select_option('form[data-filters] select[name="workload"]', workloads[0])
    page.wait_for_function("() => document.querySelector('[data-chart] .js-plotly-plot .main-svg')")
    assert f"workload={workloads[0]}" in page.url
    assert chart_state(page)[0]["x"] == [workloads[0]]
    shown = page.eval_on_selector_all("table.ladder", "ts => ts.map(t => t.dataset.workload)")
    assert shown and set(shown) == {workloads[0]}
    # The URL is the state: opening it anew shows the same selection.
    open_page(page, page.url)
    assert page.locator('select[name="workload"]').input_value() == workloads[0]
    assert chart_state(page)[0]["x"] == [workloads[0]]

    # Platform filter on the home page: only the PPU family is left.
    open_page(page, f"{site.url}/?platform=ppu")
    images = page.eval_on_selector_all("#families .family", "cs => cs.map(c => c.dataset.image)")
    assert images == [seed.PPU_IMAGE]
    with page.expect_navigation():
        page.click("[data-clear-filters]")
    images = page.eval_on_selector_all("#families .family", "cs => cs.map(c => c.dataset.image)")
    assert set(images) == {seed.GPU_IMAGE, seed.PPU_IMAGE}
    assert_no_console_errors(console)


def _check_download(fmt: str, content: bytes) -> None:
    text = content.decode("utf-8")
    if fmt == "html":
        assert "<html" in text.lower() and seed.NEW in text
        # Self-contained: plotly.js inlined, no script loaded from elsewhere.
        assert not re.search(r"<script[^>]+src=[\"']?(https?:)?//", text), "external script"
        assert "Plotly.newPlot" in text
    elif fmt == "md":
        assert text.lstrip().startswith("#") and seed.NEW in text
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        assert len(rows) > 1 and len(rows[0]) > 1
        assert all(len(r) == len(rows[0]) for r in rows if r)
    elif fmt == "json":
        body = json.loads(text)
        assert body["release"]["ref"] == seed.NEW
    else:  # pragma: no cover - a new format needs a check here
        raise AssertionError(fmt)


def test_every_export_link_downloads_a_valid_file(
    page: Any, site: Site, console: Console, tmp_path: Path
) -> None:
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    links = page.locator("#downloads a[data-format]")
    formats = [links.nth(i).get_attribute("data-format") for i in range(links.count())]
    assert set(formats) == {"html", "md", "csv", "json"}
    for fmt in formats:
        with page.expect_download() as info:
            page.click(f'#downloads a[data-format="{fmt}"]')
        download = info.value
        assert download.failure() is None, (fmt, download.failure())
        target = tmp_path / (download.suggested_filename or f"report.{fmt}")
        download.save_as(str(target))
        _check_download(fmt, target.read_bytes())
    assert_no_console_errors(console)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/releases/training-nv-pytorch:99.99", "release 'training-nv-pytorch:99.99' does not exist"),
        ("/runs/999999", "run 999999 does not exist"),
        ("/studies/999999", "study 999999 does not exist"),
        ("/no/such/page", "There is no page at /no/such/page"),
    ],
)
def test_unknown_things_are_html_404_pages(
    page: Any, site: Site, console: Console, screenshots: Path, path: str, message: str
) -> None:
    console.expected.append("404")  # Chromium logs the failed document load itself
    open_page(page, site.url + path, status=404)
    assert page.locator("h1").inner_text() == "Not found"
    assert message in page.locator(".message").inner_text()
    assert page.locator("nav a").count() == 5  # still the dashboard, with its navigation
    if path.startswith("/releases"):
        shoot(page, screenshots, "not-found")
    assert_no_console_errors(console)


def test_api_paths_keep_problem_json(page: Any, site: Site) -> None:
    response = page.request.get(f"{site.url}/api/v1/runs/999999")
    assert response.status == 404
    assert response.headers["content-type"].startswith("application/problem+json")


def test_plotly_is_served_by_the_app_not_a_cdn(page: Any, site: Site, console: Console) -> None:
    external: list[str] = []
    page.on("request", lambda r: external.append(r.url) if not r.url.startswith(site.url) else None)
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    scripts = page.eval_on_selector_all("script[src]", "ss => ss.map(s => s.src)")
    assert any("/vendor/plotly.min.js" in s for s in scripts)
    assert not [u for u in external if not u.startswith("data:")]
    response = page.request.get(f"{site.url}/vendor/plotly.min.js")
    assert response.status == 200 and "max-age" in response.headers["cache-control"]
    assert_no_console_errors(console)


@pytest.fixture(scope="module")
def empty_site(db_factory: Any) -> Any:
    server = start_live_server(db_factory.new("sqlite"))
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/", "/releases", "/compare", "/studies", "/clusters"])
def test_empty_states_say_what_to_do_next(
    page: Any, empty_site: Any, console: Console, screenshots: Path, path: str
) -> None:
    open_page(page, empty_site.url + path)
    hint = page.locator(".empty").first.inner_text()
    assert "POST /api/v1/" in hint or "/api/v1/" in hint, hint
    if path == "/":
        assert "No releases yet" in hint
        shoot(page, screenshots, "home-empty")
    assert_no_console_errors(console)
