"""GET /api/v1/advice/checkpointing over real HTTP, and `ablate advise checkpointing`, on both databases."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from ablate.backend.cli.main import app as cli
from ablate.backend.services.advice import checkpointing_advice
from tests.advisor import seed
from tests.support.live_server import LiveServer, start_live_server

PATH = "/advice/checkpointing"
BASE = {"release": seed.RELEASE, "cluster": "h200-1x8", "workload": "torch-llm-llama-1b"}


@pytest.fixture
def server(db_url: str) -> Iterator[tuple[LiveServer, dict[str, list[int]]]]:
    live = start_live_server(db_url)
    try:
        ids = seed.seed(live.database)
        yield live, ids
    finally:
        live.stop()


def get(live: LiveServer, **params: object) -> httpx.Response:
    return httpx.get(f"{live.api}{PATH}", params={**BASE, **params}, timeout=60)  # type: ignore[arg-type]


def test_advice_from_a_measured_sweep(server: tuple[LiveServer, dict[str, list[int]]]) -> None:
    live, ids = server
    r = get(live, memory_gib=60, utilisation=0.9)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["n_layers"] == 16 and body["basis"] == "measured"
    assert body["memory_budget_gib"] == pytest.approx(54.0) and body["device_memory_source"] == "given"
    # every run of the workload on the cluster is used, of both releases
    assert sorted(body["run_ids"]["memory"]) == sorted(ids["main"] + ids["older"])
    assert sorted(body["run_ids"]["similar"]) == sorted(ids["similar"])
    table = body["table"]
    assert [row["ckpt_layers"] for row in table] == list(range(17))
    # the smallest k whose upper bound fits
    k = body["recommended_ckpt_layers"]
    assert k == next(row["ckpt_layers"] for row in table if row["high_gib"] <= 54.0)
    assert all(not row["fits"] for row in table[:k]) and table[k]["fits"]
    # peak(k) = 40 + 2.5 max(16 - k, 1): 54 GiB is reached at k = 10.4, so about 11 with its interval
    assert 10 <= k <= 13
    chosen = body["predicted_peak_memory_gib"]
    assert chosen["low"] <= chosen["value"] <= chosen["high"] <= 54.0
    for unmeasured in (6, 12):
        row = table[unmeasured]
        assert row["low_gib"] <= seed.peak(unmeasured, 0) <= row["high_gib"]
        assert row["measured_peak_memory_gib"] == []
    assert len(table[8]["measured_peak_memory_gib"]) == 3
    ratio = body["predicted_throughput_ratio"]
    assert ratio["low"] <= 1 / (1 + 0.02 * k) <= ratio["high"]
    assert body["message"].startswith(f"checkpoint {k} of 16 layers")
    # the endpoint says what the service says
    with live.database.read() as session:
        expected = checkpointing_advice(
            session, seed.RELEASE, "h200-1x8", "torch-llm-llama-1b", memory_gib=60, utilisation=0.9
        ).to_json()
    assert body == expected


def test_device_memory_from_the_device_model_and_a_budget_that_fits_everything(
    server: tuple[LiveServer, dict[str, list[int]]],
) -> None:
    live, _ = server
    body = get(live).json()
    assert body["device_memory_gib"] == pytest.approx(139.8) and body["utilisation"] == 0.92
    assert body["device_memory_source"] == "device model H200"
    assert body["recommended_ckpt_layers"] == 0 and body["predicted_throughput_ratio"]["value"] == 1.0


def test_nothing_fits_says_by_how_much(server: tuple[LiveServer, dict[str, list[int]]]) -> None:
    live, _ = server
    body = get(live, memory_gib=30, utilisation=1.0).json()
    assert body["recommended_ckpt_layers"] is None and body["fits"] is False
    high = body["table"][-1]["high_gib"]
    assert body["shortfall_gib"] == pytest.approx(high - 30.0)
    assert body["evaluated_ckpt_layers"] == 16
    assert body["message"].startswith("does not fit: even with all 16 layers checkpointed")


def test_a_workload_without_runs(server: tuple[LiveServer, dict[str, list[int]]]) -> None:
    live, ids = server
    body = get(live, workload="torch-llm-llama-1b-mb3", memory_gib=80).json()
    # the two llama-1b sweeps are of similar shape: they inform the per-layer coefficients
    assert body["basis"] == "similar workloads" and body["run_ids"]["memory"] == []
    assert set(body["similar_workloads"]) == {"torch-llm-llama-1b", "torch-llm-llama-1b-mb2"}
    assert sorted(body["run_ids"]["similar"]) == sorted(ids["main"] + ids["older"] + ids["similar"])


@pytest.mark.parametrize(
    ("params", "status", "loc", "text"),
    [
        ({"release": "nope:1"}, 404, "release", "does not exist"),
        ({"cluster": "nope"}, 404, "cluster", "does not exist"),
        ({"workload": "nope"}, 404, "workload", "does not exist"),
        ({"memory_gib": 0}, 422, "memory_gib", "positive"),
        ({"memory_gib": -8}, 422, "memory_gib", "positive"),
        ({"utilisation": 0}, 422, "utilisation", "(0, 1]"),
        ({"utilisation": 1.5}, 422, "utilisation", "(0, 1]"),
        ({"workload": "ljperf-mystery"}, 422, "workload", "has no layer count"),
        ({"cluster": "mystery-1x8"}, 422, "memory_gib", "pass memory_gib"),
    ],
)
def test_bad_inputs_are_problem_json(
    server: tuple[LiveServer, dict[str, list[int]]],
    params: dict[str, object],
    status: int,
    loc: str,
    text: str,
) -> None:
    live, _ = server
    r = get(live, **params)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and text in body["detail"]
    assert [e["loc"] for e in body["errors"]] == [loc]


def test_missing_parameters_are_problem_json(server: tuple[LiveServer, dict[str, list[int]]]) -> None:
    live, _ = server
    r = httpx.get(f"{live.api}{PATH}", params={"release": seed.RELEASE}, timeout=30)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")


def test_cli_prints_the_table(server: tuple[LiveServer, dict[str, list[int]]], db_url: str) -> None:
    args = ["advise", "checkpointing", "--release", seed.RELEASE, "--cluster", "h200-1x8"]
    good = [*args, "--workload", "torch-llm-llama-1b", "--memory-gib", "60", "--utilisation", "0.9"]
    result = CliRunner().invoke(cli, [*good, "--url", db_url], terminal_width=200)
    assert result.exit_code == 0, result.output
    with server[0].database.read() as session:
        advice = checkpointing_advice(
            session, seed.RELEASE, "h200-1x8", "torch-llm-llama-1b", memory_gib=60, utilisation=0.9
        ).advice
    assert advice.message in " ".join(result.output.split())
    assert f"{advice.recommended_ckpt_layers} <-" in result.output
    assert "basis: measured" in result.output
    as_json = CliRunner().invoke(cli, [*good, "--json", "--url", db_url])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["recommended_ckpt_layers"] == (
        advice.recommended_ckpt_layers
    )
    # "does not fit" is an answer, not a success: exit 3, table and JSON still printed.
    tight = [*args, "--workload", "torch-llm-llama-1b", "--memory-gib", "30", "--utilisation", "1"]
    for extra in ([], ["--json"]):
        nofit = CliRunner().invoke(cli, [*tight, *extra, "--url", db_url], terminal_width=200)
        assert nofit.exit_code == 3, nofit.output
        assert "does not fit" in nofit.output
    # The real console script: a bad input ends with one line and exit code 1.
    ablate = str(Path(sys.executable).parent / "ablate")
    for extra, text in (
        (["--workload", "ljperf-mystery"], "error: workload: workload 'ljperf-mystery' has no layer count"),
        (["--workload", "torch-llm-llama-1b", "--memory-gib", "0"], "error: memory_gib: must be a positive"),
    ):
        bad = subprocess.run(
            [ablate, *args, *extra, "--url", db_url], capture_output=True, text=True, timeout=120
        )
        assert bad.returncode == 1 and "Traceback" not in bad.stderr
        assert bad.stderr.startswith(text) and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_cli_asks_a_server_and_prints_the_same(
    server: tuple[LiveServer, dict[str, list[int]]], db_url: str
) -> None:
    """`--server` (a CI runner has no database): the same table and JSON as from the database."""
    live = server[0]
    args = ["advise", "checkpointing", "--release", seed.RELEASE, "--cluster", "h200-1x8"]
    good = [*args, "--workload", "torch-llm-llama-1b", "--memory-gib", "60", "--utilisation", "0.9"]
    local = CliRunner().invoke(cli, [*good, "--url", db_url], terminal_width=200)
    remote = CliRunner().invoke(cli, [*good, "--server", live.url], terminal_width=200)
    assert remote.exit_code == 0, remote.output
    assert remote.output == local.output and "basis: measured" in remote.output
    local_json = CliRunner().invoke(cli, [*good, "--json", "--url", db_url])
    remote_json = CliRunner().invoke(cli, [*good, "--json", "--server", live.url])
    assert json.loads(remote_json.stdout) == json.loads(local_json.stdout)
    ablate = str(Path(sys.executable).parent / "ablate")
    for extra, text in (
        (["--workload", "ljperf-mystery", "--server", live.url], "error: HTTP 422"),
        (["--workload", "torch-llm-llama-1b", "--server", "http://127.0.0.1:1"], "error: cannot reach"),
        (["--workload", "torch-llm-llama-1b", "--server", live.url, "--url", db_url], "error: give --url"),
    ):
        bad = subprocess.run([ablate, *args, *extra], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.startswith(text) and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "has no layer count" in subprocess.run(
        [ablate, *args, "--workload", "ljperf-mystery", "--server", live.url],
        capture_output=True, text=True, timeout=120,
    ).stderr  # fmt: skip


def test_cli_over_a_server_that_needs_a_token(db_url: str) -> None:
    live = start_live_server(db_url, settings={"read_requires_token": True})
    try:
        seed.seed(live.database)
        from tests.api.conftest import make_token

        reader = make_token(live.database, "reader", "read")
        args = ["advise", "checkpointing", "--release", seed.RELEASE, "--cluster", "h200-1x8"]
        good = [*args, "--workload", "torch-llm-llama-1b", "--memory-gib", "60", "--json"]
        refused = CliRunner().invoke(cli, [*good, "--server", live.url])
        assert refused.exit_code == 1 and "HTTP 401" in str(refused.exception)
        allowed = CliRunner().invoke(cli, [*good, "--server", live.url, "--token", reader])
        assert allowed.exit_code == 0, allowed.output
        assert json.loads(allowed.stdout)["workload"] == "torch-llm-llama-1b"
    finally:
        live.stop()
