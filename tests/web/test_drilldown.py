"""Drill-down in Chromium: a number on the release, compare and study pages leads to exactly the
runs behind it, and a cell's history chart renders with its verdicts marked. On both databases."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from ablate.backend.dashboard.links import Scope, cell_runs_url
from tests.web import seed
from tests.web.conftest import Console, Site
from tests.web.helpers import assert_no_console_errors, chart_state, open_page

pytestmark = pytest.mark.browser

CLUSTER = seed.GPU_CLUSTER["name"]
METRIC = "throughput_tokens_per_s"
VARIANTS = [name for name, *_ in seed.LADDER]
WORKLOADS = [w["name"] for w in seed.WORKLOADS]


@pytest.fixture(autouse=True)
def patient(page: Any) -> None:
    """Release pages build a whole comparison (and a history one per release): on a loaded
    machine that can outlast the default 15 s, which is about speed, not about drill-down."""
    page.set_default_timeout(90_000)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_site(request: pytest.FixtureRequest) -> Site:
    site: Site = request.getfixturevalue("site" if request.param == "sqlite" else "pg_site")
    return site


def cell_ids(site: Site, ref: str, workload: str, variant: str) -> set[int]:
    """The succeeded runs of one cell, from the order the seed submitted them in (workload,
    variant, repeat), not from any filter under test."""
    i = WORKLOADS.index(workload) * len(VARIANTS) + VARIANTS.index(variant)
    return set(site.data.run_ids[ref][i * seed.REPEATS : (i + 1) * seed.REPEATS])


def listed_ids(page: Any) -> set[int]:
    page.wait_for_url("**/runs?**")
    page.wait_for_selector("#runs, #no-runs")
    rows = page.locator("#runs tbody tr")
    return {int(rows.nth(i).get_attribute("data-run-id")) for i in range(rows.count())}


def click_through(page: Any, locator: Any) -> set[int]:
    locator.scroll_into_view_if_needed()
    with page.expect_navigation():
        locator.click()
    return listed_ids(page)


def test_release_numbers_lead_to_exactly_their_runs(page: Any, any_site: Site, console: Console) -> None:
    site = any_site
    url = f"{site.url}/releases/{seed.NEW}"
    workload, variant = WORKLOADS[0], "AC2+ACCL+CompilerOpt"  # the cell with a failed run besides
    row = (
        f'table.ladder[data-cluster="{CLUSTER}"][data-workload="{workload}"][data-metric="{METRIC}"] '
        f'tr[data-variant="{variant}"]'
    )
    open_page(page, url)
    got = click_through(page, page.locator(f"{row} td.median a.runs-link"))
    assert got == cell_ids(site, seed.NEW, workload, variant)
    assert site.data.failed_run_id not in got
    statuses = page.locator("#runs tbody tr [data-status]").all_inner_texts()
    assert statuses == ["succeeded"] * seed.REPEATS

    open_page(page, url)
    got = click_through(page, page.locator(f"{row} td.speedup a.runs-link"))
    assert got == cell_ids(site, seed.NEW, workload, variant) | cell_ids(site, seed.NEW, workload, "Base")

    open_page(page, url)
    got = click_through(page, page.locator(f"{row} td.step a.runs-link"))
    assert got == cell_ids(site, seed.NEW, workload, variant) | cell_ids(site, seed.NEW, workload, "AC2+ACCL")

    # A verdict row: the change reads both releases' runs of the cell, each median its own side.
    reg_workload, reg_variant = seed.REGRESSED
    delta = (
        f'#deltas tr[data-cluster="{CLUSTER}"][data-workload="{reg_workload}"]'
        f'[data-variant="{reg_variant}"][data-metric="{METRIC}"]'
    )
    old = cell_ids(site, seed.OLD, reg_workload, reg_variant)
    new = cell_ids(site, seed.NEW, reg_workload, reg_variant)
    for cell, expected in (("baseline", old), ("contender", new), ("change", old | new)):
        open_page(page, url)
        assert page.locator(delta).get_attribute("data-verdict") == "regressed"
        assert click_through(page, page.locator(f"{delta} td.{cell} a.runs-link")) == expected
    assert_no_console_errors(console)


def test_history_chart_renders_with_the_verdicts_marked(page: Any, any_site: Site, console: Console) -> None:
    site = any_site
    reg_workload, reg_variant = seed.REGRESSED
    open_page(page, f"{site.url}/releases/{seed.NEW}")
    link = page.locator(
        f'#deltas tr[data-workload="{reg_workload}"][data-variant="{reg_variant}"][data-metric="{METRIC}"] '
        "a.history-link"
    )
    with page.expect_navigation():
        link.click()
    page.wait_for_function("() => document.querySelector('#history .js-plotly-plot .main-svg')")
    (chart,) = [c for c in chart_state(page) if c["kind"] == "history"]
    assert chart["rendered"] and chart["hasSvg"] and chart["data"] == chart["expected"]
    assert chart["names"] == [reg_variant, "regression"]
    assert chart["x"] == [seed.OLD, seed.NEW]
    # The history's points link to their runs too.
    runs = page.locator(f'#history-runs a[data-release="{seed.OLD}"]')
    assert click_through(page, runs) == cell_ids(site, seed.OLD, reg_workload, reg_variant)
    assert_no_console_errors(console)


def test_compare_and_study_numbers_lead_to_their_runs(page: Any, site: Site, console: Console) -> None:
    workload, variant = WORKLOADS[1], "Base"
    cell = f'tr[data-workload="{workload}"][data-variant="{variant}"][data-metric="{METRIC}"]'
    row = f"#compare-unchanged {cell}, #compare-deltas {cell}"
    open_page(page, f"{site.url}/compare?a={quote(seed.OLD)}&b={quote(seed.NEW)}")
    page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    got = click_through(page, page.locator(f"{row} >> td.contender a.runs-link").first)
    assert got == cell_ids(site, seed.NEW, workload, variant)

    # Two hand-picked run sets: each side's median lists the side's runs of the cell, no others.
    base = sorted(cell_ids(site, seed.OLD, workload, variant))
    picked = sorted(cell_ids(site, seed.NEW, workload, variant))[:3]
    sides = f"baseline_runs={','.join(map(str, base))}&contender_runs={','.join(map(str, picked))}"
    open_page(page, f"{site.url}/compare?{sides}")
    got = click_through(page, page.locator(f"{row} >> td.contender a.runs-link").first)
    assert got == set(picked)

    study = site.data.queued_study_id
    open_page(page, f"{site.url}/studies/{study}")
    got = click_through(page, page.locator("#study-runs a", has_text="run list"))
    assert len(got) == 2 * 2 * 2  # 2 variants x 2 workloads x 2 repeats
    assert all(s == "queued" for s in page.locator("#runs tbody tr [data-status]").all_inner_texts())
    assert_no_console_errors(console)


def test_a_run_list_of_unknown_names_says_which(page: Any, site: Site) -> None:
    open_page(page, f"{site.url}/runs?cluster=no-such-cluster&variant=Base", status=404)
    assert "no cluster is named 'no-such-cluster'" in page.locator(".message").inner_text()
    open_page(page, f"{site.url}/runs?status=done", status=422)
    assert "unknown status 'done'" in page.locator(".message").inner_text()
    open_page(page, f"{site.url}/runs?excluded=maybe", status=422)
    assert "expected true or false, got 'maybe'" in page.locator(".message").inner_text()
    open_page(page, f"{site.url}/releases/{seed.NEW}?history_cluster={CLUSTER}", status=422)
    assert "history_workload" in page.locator(".message").inner_text()


def test_a_cell_links_to_the_runs_analyses_read() -> None:
    """Succeeded and not excluded: an excluded run is not behind any number."""
    url = cell_runs_url([Scope(release="img:1")], "c", "w", "v")
    assert url is not None and "status=succeeded" in url and "excluded=false" in url


def test_run_list_leads_with_the_primary_metric_named_with_its_unit(
    page: Any, site: Site, console: Console
) -> None:
    """At 1,400 px the primary metric was off-screen, under a raw key and without its unit."""
    page.set_viewport_size({"width": 1400, "height": 900})
    open_page(page, f"{site.url}/runs?release={seed.NEW}")
    headers = page.locator("#runs thead th").all_inner_texts()
    metrics = page.eval_on_selector_all("#runs thead th[data-metric]", "hs => hs.map(h => h.dataset.metric)")
    assert metrics[0] == "throughput_tokens_per_s", metrics
    assert "Throughput (tokens/s)" in headers and "Peak memory (GiB)" in headers, headers
    box = page.locator('#runs thead th[data-metric="throughput_tokens_per_s"]').bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1400, box
    assert_no_console_errors(console)
