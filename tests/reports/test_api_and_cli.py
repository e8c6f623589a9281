"""The comparison and report endpoints over real HTTP, and `ablate report`, on both databases."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import httpx
from typer.testing import CliRunner

from ablate.backend.cli.main import app as cli
from ablate.backend.reports.json import render_json
from ablate.backend.services import comparison as svc
from tests.reports import seed
from tests.support.live_server import LiveServer

REF = f"{seed.IMAGE}:25.12"
FAST = {"n_resamples": 499}


def test_comparison_endpoint_matches_the_service(server: LiveServer) -> None:
    r = httpx.get(f"{server.api}/releases/{REF}/comparison", params=FAST, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    with server.database.read() as s:
        expected = render_json(
            svc.build_release_comparison(s, REF, options=svc.ComparisonOptions(n_resamples=499)), indent=None
        )
    assert r.text == expected
    body = r.json()
    assert body["baseline"]["ref"] == f"{seed.IMAGE}:25.11" and body["verdict_counts"]
    again = httpx.get(
        f"{server.api}/releases/{REF}/comparison", params={**FAST, "threshold_pct": 10}, timeout=60
    )
    assert again.json()["verdict_counts"]["throughput_tokens_per_s"]["regressed"] == 0


def test_unknown_release_is_problem_json(server: LiveServer) -> None:
    for path in (
        "releases/nope:1/comparison",
        "releases/nope:1/report",
        "compare?baseline=nope:1&contender=x:2",
    ):
        r = httpx.get(f"{server.api}/{path}", timeout=30)
        assert r.status_code == 404, path
        assert r.headers["content-type"] == "application/problem+json" and r.json()["status"] == 404


def test_report_endpoint_formats(server: LiveServer) -> None:
    got = {}
    for fmt in ("html", "md", "csv", "json"):
        r = httpx.get(f"{server.api}/releases/{REF}/report", params={**FAST, "format": fmt}, timeout=120)
        assert r.status_code == 200, r.text[:300]
        got[fmt] = r.text
    assert got["html"].startswith("<!DOCTYPE html>") and "<script src" not in got["html"]
    assert json.loads(got["json"])["schema_version"] == svc.SCHEMA_VERSION
    assert next(csv.reader(io.StringIO(got["csv"])))[0] == "section"
    assert got["md"].startswith(f"# Ablation report: {REF}")
    r = httpx.get(f"{server.api}/releases/{REF}/report", params={**FAST, "format": "md", "timestamp": True})
    assert "_Generated " in r.text
    bad = httpx.get(f"{server.api}/releases/{REF}/report", params={"format": "pdf"})
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"


def test_compare_releases_runs_and_validation(server: LiveServer) -> None:
    api = server.api
    r = httpx.get(
        f"{api}/compare", params={**FAST, "baseline": f"{seed.IMAGE}:25.10", "contender": REF}, timeout=60
    )
    assert r.status_code == 200 and r.json()["baseline"]["ref"] == f"{seed.IMAGE}:25.10"
    runs = httpx.get(f"{api}/releases/{REF}/comparison", params=FAST, timeout=60).json()["runs"]

    def ids(tag: str) -> str:
        return ",".join(
            str(x["run_id"])
            for x in runs
            if x["release"].endswith(tag)
            and x["variant"] == seed.VARIANTS[-1]
            and x["workload"].startswith("deep")
        )

    r = httpx.get(
        f"{api}/compare", params={**FAST, "baseline_runs": ids("25.11"), "contender_runs": ids("25.12")}
    )
    body = r.json()
    assert r.status_code == 200 and body["kind"] == "runs"
    assert (
        next(d for d in body["deltas"] if d["metric"] == "throughput_tokens_per_s")["result"]["verdict"]
        == "regressed"
    )
    for params in (
        {"baseline": REF},
        {"baseline": REF, "baseline_runs": "1", "contender": REF},
        {
            "baseline_runs": "a,b",
            "contender_runs": "1",
        },
    ):
        r = httpx.get(f"{api}/compare", params=params)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", params
    assert (
        httpx.get(f"{api}/compare", params={"baseline_study": 999, "contender_runs": "1"}).status_code == 404
    )


def test_openapi_documents_the_compare_modes(server: LiveServer) -> None:
    spec = httpx.get(f"{server.api}/openapi.json").json()
    params = {p["name"] for p in spec["paths"]["/api/v1/compare"]["get"]["parameters"]}
    assert {
        "baseline",
        "contender",
        "baseline_runs",
        "contender_runs",
        "baseline_study",
        "contender_study",
    } <= params
    assert "/api/v1/releases/{ref}/report" in spec["paths"]


def test_cli_report_writes_the_same_bytes(server: LiveServer, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    url = server.settings.database_url
    result = CliRunner().invoke(cli, ["report", REF, "--format", "json", "-o", str(out), "--url", url])
    assert result.exit_code == 0, result.output
    api = httpx.get(f"{server.api}/releases/{REF}/report", params={"format": "json"}, timeout=120).text
    assert out.read_text(encoding="utf-8") == api
    md = CliRunner().invoke(cli, ["report", REF, "-f", "md", "--url", url])
    assert md.exit_code == 0 and md.stdout.startswith(f"# Ablation report: {REF}")
    # The real console script: expected failures end with one line and exit code 1.
    bad = subprocess.run(
        [str(Path(sys.executable).parent / "ablate"), "report", "nope:1", "--url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "error: release: release 'nope:1' does not exist; no release of image 'nope'; "
        f"images: {REF.split(':')[0]}"
    ]  # said once, with what there is


def test_cli_report_from_a_server_writes_the_same_bytes(server: LiveServer, tmp_path: Path) -> None:
    """`ablate report --server` (a CI runner has no database): the bytes the database gives."""
    url = server.settings.database_url
    for fmt in ("json", "md", "csv", "html"):
        local, remote = tmp_path / f"local.{fmt}", tmp_path / f"remote.{fmt}"
        args = ["report", REF, "-f", fmt, "--metric", "throughput_tokens_per_s"]
        made = CliRunner().invoke(cli, [*args, "-o", str(local), "--url", url])
        fetched = CliRunner().invoke(cli, [*args, "-o", str(remote), "--server", server.url])
        assert made.exit_code == 0 and fetched.exit_code == 0, fetched.output
        assert remote.read_bytes() == local.read_bytes(), fmt
        assert f"wrote {fmt} report of {REF}" in fetched.stdout
    older = CliRunner().invoke(
        cli, ["report", REF, "-f", "md", "--baseline", f"{seed.IMAGE}:25.10", "--server", server.url]
    )
    assert older.exit_code == 0 and older.stdout.startswith(f"# Ablation report: {REF}")
    assert f"{seed.IMAGE}:25.10" in older.stdout
    ablate = str(Path(sys.executable).parent / "ablate")
    for args, text in (
        (
            ["report", "nope:1", "--server", server.url],
            "error: HTTP 404 Not found: release: release 'nope:1'",
        ),
        (["report", REF, "--server", "http://127.0.0.1:1"], "error: cannot reach"),
        (["report", REF, "--server", server.url, "--url", url], "error: give --url"),
        (["report", REF, "--server", server.url, "--threshold", "0"], "error: HTTP 422"),
    ):
        bad = subprocess.run([ablate, *args], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.startswith(text) and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
