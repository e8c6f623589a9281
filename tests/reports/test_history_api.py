"""``GET /api/v1/history`` over real HTTP on both databases: values recomputed from the seeded runs,
verdicts equal to each release's own comparison, errors naming the parameter; the run-list filters
the history links to; and the report's history section."""

from __future__ import annotations

import statistics
from typing import Any

import httpx
import pytest

from ablate.backend.analysis.stats import summarize
from tests.reports import seed
from tests.support.live_server import LiveServer

LLAMA = "deepspeed/llama3-8b"
QWEN = "megatron/qwen2-7b"
LAST = seed.VARIANTS[-1]
METRIC = "throughput_tokens_per_s"
SPECS = (seed.REL_2510, seed.REL_2511, seed.REL_2512)


def _params(**over: str) -> dict[str, str]:
    base = {
        "image": seed.IMAGE,
        "cluster": seed.CLUSTER["name"],
        "workload": LLAMA,
        "variant": LAST,
        "metric": METRIC,
    }
    return base | over


def _page_verdict(server: LiveServer, ref: str, workload: str, variant: str) -> str | None:
    """The verdict the release's own comparison (what its page shows) gives the cell."""
    body = httpx.get(f"{server.api}/releases/{ref}/comparison", timeout=120).json()
    (delta,) = [
        d for d in body["deltas"] if (d["workload"], d["variant"], d["metric"]) == (workload, variant, METRIC)
    ]
    result = delta["result"]
    if result is None:
        return None
    if result["verdict"] == "unchanged" and result["indicated"] in ("improved", "regressed"):
        return "suspect"
    return str(result["verdict"])


def test_history_gives_each_release_its_summary_and_its_page_verdict(server: LiveServer) -> None:
    for workload, variant, last_verdict in ((LLAMA, LAST, "regressed"), (QWEN, "Base+ACCL", "improved")):
        r = httpx.get(
            f"{server.api}/history", params=_params(workload=workload, variant=variant), timeout=300
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert body["unit"] == "tokens/s" and body["variant"] == variant
        points = body["points"]
        assert [p["release"] for p in points] == [f"{seed.IMAGE}:{s.tag}" for s in SPECS]
        for spec, point in zip(SPECS, points, strict=True):
            values = seed.expected_values(spec, workload, variant)
            expected = summarize(values, confidence=body["confidence"])
            assert point["n"] == len(values) == 5
            assert point["median"] == pytest.approx(statistics.median(values))
            assert point["ci_low"] == pytest.approx(expected.ci_low)
            assert point["ci_high"] == pytest.approx(expected.ci_high)
            assert point["runs_url"].startswith("/runs?release=")
        assert points[0]["verdict"] is None and points[0]["against"] is None
        assert points[1]["verdict"] == _page_verdict(server, points[1]["release"], workload, variant)
        assert points[2]["verdict"] == last_verdict
        assert points[2]["verdict"] == _page_verdict(server, points[2]["release"], workload, variant)
        assert points[2]["against"] == points[1]["release"]
        change = -8.0 if last_verdict == "regressed" else 5.0
        assert points[2]["change_pct"] == pytest.approx(change, abs=0.5)


@pytest.mark.parametrize(
    ("over", "status", "loc"),
    [
        ({"image": "no-such-image"}, 404, "image"),
        ({"cluster": "no-such-cluster"}, 404, "cluster"),
        ({"workload": "no-such-workload"}, 404, "workload"),
        ({"variant": "Base+Nothing"}, 404, "variant"),
        ({"metric": "throughput_token_per_s"}, 422, "metric"),
        ({"cluster": ""}, 422, "cluster"),
    ],
)
def test_history_refuses_unknown_names_naming_which(
    server: LiveServer, over: dict[str, str], status: int, loc: str
) -> None:
    r = httpx.get(f"{server.api}/history", params=_params(**over), timeout=60)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert loc in r.json()["detail"] or any(loc in str(e["loc"]) for e in r.json().get("errors", []))
    if over.get("metric"):
        assert "did you mean 'throughput_tokens_per_s'" in r.json()["detail"]


def test_history_needs_every_parameter(server: LiveServer) -> None:
    params = _params()
    del params["variant"]
    r = httpx.get(f"{server.api}/history", params=params, timeout=60)
    assert r.status_code == 422 and "variant" in r.text


def test_run_list_filter_takes_several_variants(server: LiveServer) -> None:
    """What a speed-up's link asks for: the succeeded runs of two variants of one cell."""
    ref = f"{seed.IMAGE}:25.12"
    params = [
        ("release", ref),
        ("cluster", seed.CLUSTER["name"]),
        ("workload", LLAMA),
        ("variant", "Base"),
        ("variant", LAST),
        ("status", "succeeded"),
        ("limit", "500"),
    ]
    r = httpx.get(f"{server.api}/runs", params=params, timeout=60)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert sorted(i["variant"] for i in items) == sorted(["Base"] * 5 + [LAST] * 5)
    tput = sorted(i["metrics"][METRIC] for i in items if i["variant"] == LAST)
    assert tput == pytest.approx(sorted(seed.expected_values(seed.REL_2512, LLAMA, LAST)))
    one = httpx.get(f"{server.api}/runs", params=params[:4] + params[5:], timeout=60).json()["items"]
    assert {i["variant"] for i in one} == {"Base"} and len(one) == 5


def test_html_report_has_the_history_section(server: LiveServer) -> None:
    ref = f"{seed.IMAGE}:25.12"
    r = httpx.get(f"{server.api}/releases/{ref}/report", params={"format": "html"}, timeout=300)
    assert r.status_code == 200
    html = r.text
    assert '<h2 id="history">History across releases</h2>' in html
    # Ten cells (2 workloads x 5 variants), all within the bound of 12: each gets its chart.
    assert "of 10 of the release's 10 cells" in html
    assert all(f'id="h{i}-history"' in html for i in range(10)) and 'id="h10-history"' not in html
    # Regressions first: the first chart is the regressed llama3 last rung, its marker in the legend.
    first = html.split('id="h0-history"', 1)[1].split("</script>", 1)[0]
    assert LAST in first and '"name":"regression"' in first
    md = httpx.get(f"{server.api}/releases/{ref}/report", params={"format": "md"}, timeout=120).text
    assert "History across releases" not in md
