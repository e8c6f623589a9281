"""Report export end to end: every format parses, says the right numbers, and is byte-identical twice."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from datetime import UTC, datetime

import numpy as np
import plotly
import pytest

from ablate.backend.db.database import Database
from ablate.backend.reports import FORMATS, render
from ablate.backend.reports.csv import COLUMNS
from ablate.backend.services import comparison as svc
from tests.reports import seed
from tests.reports.seed import REL_2511, REL_2512, ReleaseSpec

OPTS = svc.ComparisonOptions(n_resamples=499)
REF = f"{seed.IMAGE}:25.12"
LAST = seed.VARIANTS[-1]
LLAMA = "deepspeed/llama3-8b"


def _build(database: Database, ref: str = REF) -> svc.ReleaseComparison:
    with database.read() as s:
        return svc.build_release_comparison(s, ref, options=OPTS)


@pytest.fixture
def standard(database: Database) -> Database:
    seed.seed_standard(database)
    return database


def md_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells; cells are split on pipes that are not escaped."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_same_data_gives_identical_bytes(standard: Database) -> None:
    first = {fmt: render(_build(standard), fmt) for fmt in FORMATS}
    second = {fmt: render(_build(standard), fmt) for fmt in FORMATS}
    for fmt in FORMATS:
        assert first[fmt] == second[fmt], fmt
    assert "Generated" not in first["md"] and "generated_at" not in first["json"]
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert (
        json.loads(render(_build(standard), "json", generated_at=stamp))["generated_at"] == stamp.isoformat()
    )


def test_html_is_self_contained(standard: Database) -> None:
    html = render(_build(standard), "html")
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts and not any("src" in attrs for attrs in scripts)
    assert not re.search(r"<(link|img|iframe)[^>]+(href|src)=[\"']?https?:", html)
    assert f"plotly.js v{plotly.__version__.split('.')[0]}" in html or "plotly.js" in html
    assert len(html) > 3_000_000  # the bundle itself is inline
    for div in ("c0-ablation", "c0-heatmap", "c0-memory", "c0-tput-mem", "c0-w0-waterfall", "c0-w0-trend"):
        assert f'id="{div}"' in html
    for text in ("Method", "Manifest diff", "vllm", "0.11.0", "0.12.0", "Known issues", "NCCL_SOCKET_IFNAME"):
        assert text in html
    assert "torch.compile may recompile on dynamic shapes" in html
    assert '<td class="regressed">regressed</td>' in html


def test_markdown_tables_are_well_formed(standard: Database) -> None:
    md = render(_build(standard), "md")
    tables = md_tables(md)
    assert len(tables) >= 7
    for table in tables:
        assert all(len(row) == len(table[0]) for row in table), table[0]
        assert set("".join(table[1])) <= {"-"}
    regressions = next(t for t in tables if t[0][-1].startswith("Suspects"))
    assert len(regressions) == 3 and regressions[2][3] == LAST and regressions[2][9] == "regressed"
    assert "-8.0%" in regressions[2]  # the shared formatter: percentages with 1 decimal
    # Headings never skip a level (the report went from # straight to ###).
    levels = [len(line) - len(line.lstrip("#")) for line in md.splitlines() if line.startswith("#")]
    assert levels[0] == 1 and all(b - a <= 1 for a, b in itertools.pairwise(levels)), levels


def test_csv_has_runs_and_summary(standard: Database) -> None:
    c = _build(standard)
    rows = list(csv.DictReader(io.StringIO(render(c, "csv"))))
    assert tuple(rows[0].keys()) == COLUMNS
    runs = [r for r in rows if r["section"] == "run" and r["metric"] == "throughput_tokens_per_s"]
    assert len(runs) == 2 * 2 * 5 * 5  # this release and its baseline
    mine = sorted(
        float(r["value"])
        for r in runs
        if r["release"] == REF and (r["workload"], r["variant"]) == (LLAMA, LAST)
    )
    assert mine == pytest.approx(sorted(seed.expected_values(REL_2512, LLAMA, LAST)), rel=1e-15)
    summary = next(
        r
        for r in rows
        if r["section"] == "summary"
        and (r["workload"], r["variant"], r["metric"]) == (LLAMA, LAST, "throughput_tokens_per_s")
    )
    base = seed.expected_values(REL_2512, LLAMA, "Base")
    assert float(summary["speedup"]) == pytest.approx(np.median(mine) / np.median(base))
    delta = next(
        r
        for r in rows
        if r["section"] == "release_delta"
        and (r["workload"], r["variant"]) == (LLAMA, LAST)
        and r["metric"] == "throughput_tokens_per_s"
    )
    old = seed.expected_values(REL_2511, LLAMA, LAST)
    assert float(delta["change_pct"]) == pytest.approx((np.median(mine) / np.median(old) - 1) * 100)
    assert delta["verdict"] == "regressed" and delta["baseline_release"] == f"{seed.IMAGE}:25.11"


def test_json_is_machine_readable(standard: Database) -> None:
    body = json.loads(render(_build(standard), "json"))
    assert body["schema_version"] == svc.SCHEMA_VERSION and body["kind"] == "release"
    assert body["release"]["ref"] == REF and body["baseline"]["ref"] == f"{seed.IMAGE}:25.11"
    assert body["verdict_counts"]["throughput_tokens_per_s"]["regressed"] == 1
    assert body["method"]["threshold_pct"] == 3.0 and body["method"]["n_resamples"] == 499
    delta = next(d for d in body["deltas"] if d["variant"] == LAST and d["workload"] == LLAMA)
    assert delta["result"]["verdict"] == "regressed"


def test_partial_release_report_says_what_is_missing(database: Database) -> None:
    seed.seed_release(database, REL_2511)
    partial = ReleaseSpec(
        "25.12",
        {"vllm": "0.16.0"},
        skip={(w, "Base") for w in seed.WORKLOADS},
        failed={(LLAMA, "Base+ACCL"): 1},
        repeats_of={(LLAMA, LAST): 1},
    )
    seed.seed_release(database, partial)
    c = _build(database)
    outputs = {fmt: render(c, fmt) for fmt in FORMATS}
    for fmt in ("html", "md"):
        assert "no succeeded Base runs" in outputs[fmt]
        assert "one repeat only" in outputs[fmt]
    assert json.loads(outputs["json"])["missing"] == list(c.missing)
    assert list(csv.DictReader(io.StringIO(outputs["csv"])))
    failed = [
        r
        for r in csv.DictReader(io.StringIO(outputs["csv"]))
        if r["section"] == "run" and r["status"] == "failed"
    ]
    assert len(failed) == 1 and failed[0]["value"] == ""


def test_empty_release_report(database: Database) -> None:
    seed.seed_empty_release(database, "26.01", {})
    c = _build(database, f"{seed.IMAGE}:26.01")
    for fmt in FORMATS:
        assert render(c, fmt)
    assert "no runs recorded for this release" in render(c, "md")
    assert "No data to chart." in render(c, "html")


def test_the_report_and_the_release_page_draw_one_plan(standard: Database) -> None:
    """Which charts a cluster has is decided once (charts/plan.py): the report draws every planned
    chart, the release page the kinds it shows, for the same workloads."""
    from ablate.backend import charts
    from ablate.backend.charts.plan import cluster_chart_plan
    from ablate.backend.dashboard.views.release import _section
    from ablate.backend.reports.html import cluster_charts

    c = _build(standard)
    colors = charts.variant_colors(v.name for v in c.variants)
    for cluster, drawn in zip(c.clusters, cluster_charts(c), strict=True):
        plan = cluster_chart_plan(c, cluster.name, colors)
        assert [x.kind for x in drawn.charts] == [p.kind for p in plan]
        assert {p.kind for p in plan} >= {"ablation", "heatmap", "memory", "waterfall"}
        section = _section(c, cluster, None, colors)
        assert [x.kind for x in section.charts] == [p.kind for p in plan if p.kind in ("ablation", "memory")]
        waterfalls = [p.workload for p in plan if p.kind == "waterfall"]
        assert [t.workload for t in section.tables if t.waterfall_html] == waterfalls
        only = waterfalls[:1]
        narrowed = cluster_chart_plan(c, cluster.name, colors, only)
        assert [p.workload for p in narrowed if p.kind == "waterfall"] == only
