"""`ablate ci check` against a live server: the gate's exit code, its Markdown (stdout, --markdown,
$GITHUB_STEP_SUMMARY) and JSON, --wait, and the exit code 2 when it cannot decide."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ablate.backend.cli.main import app
from ablate.backend.db.models import Run
from tests.api.helpers import REF, create_release, result
from tests.support.live_server import LiveServer

runner = CliRunner()
BASELINE = "training-nv-pytorch:25.11"

# Cell by cell: a clear 10% drop (regressed), a 12% drop with p = 0.04 but q = 0.09 across the four
# comparisons (suspect), no change, a noisy gain (p = 0.6: within the noise, never suspect).
CELLS: dict[str, tuple[list[float], list[float]]] = {
    "Base": ([1000, 1004, 998, 1002, 1001], [900, 903, 899, 901, 902]),
    "Base+ACCL": ([950, 1000, 1050], [830, 880, 930]),
    "AC2+ACCL": ([1000, 1002, 999], [1001, 1000, 1002]),
    "AC2+ACCL+CompilerOpt": ([1000, 1400, 700], [1150, 1550, 850]),
}


def seed(admin: httpx.Client) -> None:
    create_release(admin, tag="25.11", release_date="2025-11-15")
    create_release(admin)
    results = []
    for position, (variant, sides) in enumerate(CELLS.items()):
        for ref, values in zip((BASELINE, REF), sides, strict=True):
            results += [
                result(
                    release=ref,
                    variant={"name": variant, "position": position, "factors": []},
                    metrics={"throughput_tokens_per_s": value},
                    series={},
                )
                for value in values
            ]
    response = admin.post("/results", json={"results": results})
    assert response.status_code == 201, response.text


def check(server: str, *args: str) -> Any:
    return runner.invoke(app, ["ci", "check", REF, "--server", server, *args])


def test_gate_fails_on_a_regression_and_names_each_cell(
    live_server: LiveServer, admin: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(admin)
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    md = tmp_path / "gate.md"
    gated = check(live_server.url, "--markdown", str(md))
    assert gated.exit_code == 1, gated.output
    text = md.read_text()
    assert text == gated.stdout
    assert summary.read_text() == "earlier step\n" + text + "\n"  # appended, not replaced
    assert f"Ablate gate: `{REF}` against `{BASELINE}`: failed" in text
    assert "1 regressed, 1 suspect" in text
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| **regressed**") or line.startswith("| suspect")
    ]
    assert len(rows) == 2
    regressed, suspect = rows
    # the cell, its change and interval, q, the rung, and a link to its runs in both releases
    assert "| Base |" in regressed and "throughput" in regressed and "| -9.99% |" in regressed
    assert re.search(r"\[-\d+\.\d+%, -\d+\.\d+%\]", regressed)
    q = float(regressed.split(" | ")[-2])
    assert q < 0.05
    link = re.search(r"\[runs\]\((\S+)\)", regressed)
    assert link and link.group(1).startswith(f"{live_server.url}/runs?")
    page = httpx.get(link.group(1), timeout=30)
    assert page.status_code == 200
    assert "Base+ACCL" in suspect and "Compiler" not in text  # a noisy gain never fails a gate
    # The dashboard's run list behind the link holds exactly the cell's runs in both releases.
    with live_server.database.read() as session:
        cell_runs = session.query(Run).filter(Run.variant.has(name="Base")).count()
    assert cell_runs == 10 and page.text.count("/runs/") >= 10


def test_fail_on_suspect_json_and_a_passing_gate(live_server: LiveServer, admin: httpx.Client) -> None:
    seed(admin)
    as_json = check(live_server.url, "--json", "--fail-on", "suspect")
    assert as_json.exit_code == 1
    body = json.loads(as_json.stdout)
    assert body["failed"] is True and body["fail_on"] == "suspect" and body["baseline"] == BASELINE
    assert [(c["verdict"], c["rung"]) for c in body["flagged"]] == [
        ("regressed", "Base"),
        ("suspect", "Base+ACCL"),
    ]
    assert body["counts"]["regressed"] == 1 and body["counts"]["suspect"] == 1
    # A next release with the steady cell only: nothing reaches the gate, even failing on suspects.
    create_release(admin, tag="26.01", release_date="2026-01-15")
    steady = [
        result(
            release="training-nv-pytorch:26.01", variant="AC2+ACCL", metrics={"throughput_tokens_per_s": v}
        )
        for v in (1000, 1001, 1002)
    ]
    assert admin.post("/results", json={"results": steady}).status_code == 201
    newer = runner.invoke(
        app, ["ci", "check", "training-nv-pytorch:26.01", "--fail-on", "suspect", "--server", live_server.url]
    )
    assert newer.exit_code == 0, newer.output
    assert f"against `{REF}`: passed" in newer.stdout and "No cell regressed or is suspect." in newer.stdout
    passing = runner.invoke(app, ["ci", "check", BASELINE, "--server", live_server.url])
    assert passing.exit_code == 0, passing.output
    assert "No baseline release to compare with" in passing.stdout and ": passed" in passing.stdout


def test_gate_cannot_decide_exits_2(live_server: LiveServer, admin: httpx.Client) -> None:
    seed(admin)
    unknown = runner.invoke(app, ["ci", "check", "training-nv-pytorch:99.1", "--server", live_server.url])
    assert unknown.exit_code == 2 and "does not exist" in unknown.output
    away = runner.invoke(app, ["ci", "check", REF, "--server", "http://127.0.0.1:1"])
    assert away.exit_code == 2 and "cannot reach" in away.output
    bad = check(live_server.url, "--fail-on", "improved")
    assert bad.exit_code == 2 and "--fail-on must be one of" in bad.output


def test_wait_holds_the_gate_until_the_release_s_runs_are_done(
    live_server: LiveServer, admin: httpx.Client
) -> None:
    """A run of the release still queued: --wait waits for it (here: until it is cancelled), and gives
    up with exit 2 after --wait-timeout."""
    seed(admin)
    plan = {
        "release": REF,
        "cluster": "h200-2x8",
        "variants": ["Base"],
        "workloads": ["deepspeed/llama3-8b"],
        "repeats": 1,
    }
    study = admin.post("/studies", json=plan)
    assert study.status_code == 201, study.text
    timed_out = check(live_server.url, "--wait", "--wait-timeout", "1", "--poll", "0.2")
    assert timed_out.exit_code == 2 and "still queued or running" in timed_out.output
    not_waiting = check(live_server.url)
    assert (
        not_waiting.exit_code == 1 and "1 run(s) of the release still queued or running" in not_waiting.stdout
    )

    def cancel_soon() -> None:
        time.sleep(2.0)
        admin.post(f"/studies/{study.json()['id']}/cancel")

    canceller = threading.Thread(target=cancel_soon)
    canceller.start()
    waited = check(live_server.url, "--wait", "--wait-timeout", "120", "--poll", "0.5")
    canceller.join()
    assert waited.exit_code == 1, waited.output
    assert "still queued" not in waited.stdout and "1 regressed" in waited.stdout
