"""The advisor's section in the release report (HTML and Markdown, API and CLI) and on the release
page, on both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from ablate.backend.charts.checkpointing import measured_ratios, memory_vs_k, throughput_vs_k
from ablate.backend.cli.main import app as cli
from ablate.backend.services.advice import release_advice
from tests.advisor import seed
from tests.support.live_server import LiveServer, start_live_server

REPORT = f"/releases/{seed.RELEASE}/report"


@pytest.fixture
def server(db_url: str) -> Iterator[LiveServer]:
    live = start_live_server(db_url)
    try:
        seed.seed(live.database)
        yield live
    finally:
        live.stop()


def test_figures_show_points_fit_band_and_budget(server: LiveServer) -> None:
    with server.database.read() as session:
        advice = release_advice(session, seed.RELEASE)
    item = next(i for i in advice.items if i.workload == "torch-llm-llama-1b")
    fig = memory_vs_k(item)
    names = [t.name for t in fig.data]
    assert names[1:] == ["95% prediction interval", "predicted (measured)", "measured runs", names[-1]]
    assert names[-1].startswith("budget 128.6 GiB (139.8 x 0.92)")
    band_high, band_low, line, points, budget = fig.data
    assert list(line.x) == list(range(17)) and all(
        lo <= y <= hi for lo, y, hi in zip(band_low.y, line.y, band_high.y, strict=True)
    )
    assert len(points.x) == len(item.runs) == 16 and list(budget.y) == [item.advice.memory_budget_gib] * 2
    # the recommended k (0 here: everything fits 128.6 GiB) is marked
    assert [s.x0 for s in fig.layout.shapes] == [0]
    tput = throughput_vs_k(item)
    ratios = measured_ratios(item)
    # k = 0 runs of the same group are the reference: their ratios lie around 1
    assert all(abs(r - 1) < 0.01 for k, r, _ in ratios if k == 0)
    assert len(tput.data[-1].x) == len(ratios) == 16  # the 25.11 run (k = 0) is its group's own reference
    assert [r for k, r, label in ratios if "25.11" in label] == [1.0]
    assert "Throughput vs checkpointed layers" in tput.layout.title.text


def test_report_has_the_section(server: LiveServer, db_url: str) -> None:
    md = httpx.get(f"{server.api}{REPORT}", params={"format": "md", "n_resamples": 499}, timeout=120).text
    assert "## Activation checkpointing advice" in md
    summary = re.search(r"\| h200-1x8 \| torch-llm-llama-1b \| 0 of 16 \|[^\n]*\| measured \|", md)
    assert summary, md
    assert "### torch-llm-llama-1b on h200-1x8: peak memory and throughput by k" in md
    assert "| 0 (recommended) |" in md
    # what could not be advised, and why
    assert "ljperf-mystery: workload 'ljperf-mystery' has no layer count" in md
    assert "mystery-1x8 / torch-llm-llama-1b: the memory of a device" in md
    html = httpx.get(f"{server.api}{REPORT}", params={"format": "html", "n_resamples": 499}, timeout=120).text
    assert '<h2 id="checkpointing-advice">' in html
    # two figures for each of the two advised workloads
    assert set(re.findall(r'id="(advisor-\d+-\w+)"', html)) == {
        f"advisor-{i}-{kind}" for i in (0, 1) for kind in ("memory", "throughput")
    }
    # the CLI writes the same bytes as the API
    out = CliRunner().invoke(cli, ["report", seed.RELEASE, "-f", "md", "--url", db_url])
    assert out.exit_code == 0
    api = httpx.get(f"{server.api}{REPORT}", params={"format": "md"}, timeout=120).text
    assert out.stdout == api


def test_release_page_has_the_section(server: LiveServer) -> None:
    r = httpx.get(f"{server.url}/releases/{seed.RELEASE}", timeout=120)
    assert r.status_code == 200
    page = r.text
    assert 'id="checkpointing-advice"' in page
    assert (
        page.count('data-chart="advisor-memory"') == 2 and page.count('data-chart="advisor-throughput"') == 2
    )
    assert "torch-llm-llama-1b on h200-1x8:" in page and "checkpoint 0 of 16 layers" in page
    filtered = httpx.get(
        f"{server.url}/releases/{seed.RELEASE}", params={"workload": "torch-llm-llama-1b-mb2"}, timeout=120
    ).text
    assert filtered.count('data-chart="advisor-memory"') == 1
    assert 'data-workload="torch-llm-llama-1b-mb2"' in filtered
