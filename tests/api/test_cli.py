"""`ablate token`, `ablate release import` and `ablate results submit`, against real databases and servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from ablate.backend.cli import results as results_cli
from ablate.backend.cli.main import app
from tests.api.conftest import auth, make_token
from tests.api.helpers import assert_problem, create_release, result, snapshot
from tests.support.live_server import LiveServer

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))
runner = CliRunner()

RELEASE_YAML = """\
image: training-xpu-pytorch
tag: "26.01"
platform: ppu
release_date: 2026-01-20
manifest: {ppu_sdk: 2.0.0, transformer_engine: "2.8", vllm: 0.12.0}
driver_requirements: {ppu_driver: ">=1.1.0"}
notes:
  features: [PPU SDK 2.0.0]
  known_issues: [set NCCL_SOCKET_IFNAME on multi-node runs]
  environment_rules: [{when: "nodes > 1", set: {NCCL_SOCKET_IFNAME: eth0}}]
"""


def test_token_create_list_revoke(db_url: str) -> None:
    created = runner.invoke(app, ["token", "create", "--name", "ci-nv", "--scope", "submit", "--url", db_url])
    assert created.exit_code == 0, created.output
    secret = created.output.strip().splitlines()[-1]
    assert secret.startswith("abl_")
    listed = runner.invoke(app, ["token", "list", "--url", db_url])
    assert "ci-nv" in listed.output and "submit" in listed.output and secret not in listed.output
    dup = runner.invoke(app, ["token", "create", "--name", "ci-nv", "--url", db_url])
    assert dup.exit_code == 1
    assert runner.invoke(app, ["token", "revoke", "ci-nv", "--url", db_url]).exit_code == 0
    assert runner.invoke(app, ["token", "revoke", "nobody", "--url", db_url]).exit_code == 1


def test_token_create_with_an_expiry(db_url: str) -> None:
    args = [
        "token",
        "create",
        "--name",
        "ci-month",
        "--scope",
        "read",
        "--expires-in",
        "30d",
        "--url",
        db_url,
    ]
    created = runner.invoke(app, args)
    assert created.exit_code == 0, created.output
    assert ", expires 20" in created.output and " UTC); secret" in created.output, created.output
    listed = runner.invoke(app, ["token", "list", "--url", db_url])
    assert "expires" in listed.output and "never" not in listed.output, listed.output
    bad = runner.invoke(app, ["token", "create", "--name", "x", "--expires-in", "1 month", "--url", db_url])
    assert bad.exit_code == 1 and "'1 month' is not a lifetime" in bad.output + str(bad.exception)


def test_release_import_creates_then_merges(
    live_server: LiveServer, tmp_path: Path, client: httpx.Client
) -> None:
    path = tmp_path / "26.01.yaml"
    path.write_text(RELEASE_YAML)
    first = runner.invoke(app, ["release", "import", str(path), "--url", live_server.settings.database_url])
    assert first.exit_code == 0 and "created release training-xpu-pytorch:26.01" in first.output, first.output
    got = client.get("/releases/training-xpu-pytorch:26.01").json()
    assert got["manifest"]["transformer_engine"] == "2.8" and got["release_date"] == "2026-01-20"
    assert got["notes"]["known_issues"] == ["set NCCL_SOCKET_IFNAME on multi-node runs"]
    # A file that names fewer components and a newer one: merged, nothing recorded is dropped.
    smaller = RELEASE_YAML.replace(
        '{ppu_sdk: 2.0.0, transformer_engine: "2.8", vllm: 0.12.0}', '{vllm: "0.12.1", torch: "2.10"}'
    )
    path.write_text(smaller.replace("PPU SDK 2.0.0", "PPU SDK 2.0.1"))
    second = runner.invoke(app, ["release", "import", str(path), "--url", live_server.settings.database_url])
    assert second.exit_code == 0, second.output
    assert "merged" in second.output and "manifest.vllm: 0.12.0 -> 0.12.1" in second.output
    assert "manifest.torch: added 2.10" in second.output and "notes.features: 1 added" in second.output
    got = client.get("/releases/training-xpu-pytorch:26.01").json()
    assert got["manifest"] == {
        "ppu_sdk": "2.0.0",
        "transformer_engine": "2.8",
        "vllm": "0.12.1",
        "torch": "2.10",
    }
    assert got["notes"]["features"] == ["PPU SDK 2.0.0", "PPU SDK 2.0.1"]
    again = runner.invoke(app, ["release", "import", str(path), "--url", live_server.settings.database_url])
    assert again.exit_code == 0 and "unchanged" in again.output
    # An unquoted version YAML reads as a number (2.10 -> 2.1): refused, asking for quotes.
    path.write_text(smaller.replace('torch: "2.10"', "torch: 2.10"))
    floated = runner.invoke(app, ["release", "import", str(path), "--url", live_server.settings.database_url])
    assert floated.exit_code == 1 and "manifest.torch: quote it" in str(floated.exception), floated.output
    assert client.get("/releases/training-xpu-pytorch:26.01").json()["manifest"]["torch"] == "2.10"
    path.write_text(RELEASE_YAML.replace('tag: "26.01"', "tag: 26.10"))
    unquoted = runner.invoke(
        app, ["release", "import", str(path), "--url", live_server.settings.database_url]
    )
    assert unquoted.exit_code == 1


def test_results_submit_end_to_end(
    live_server: LiveServer, admin: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    good = tmp_path / "run.json"
    good.write_text(json.dumps({"results": [result(), result(repeat=1)]}))
    env = {**os.environ, "ABLATE_TOKEN": submit_token}
    cmd = [ABLATE, "results", "submit", str(good), "--server", live_server.url]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "stored: runs 1 2" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "already stored: runs 1 2" in again.stdout  # same file, same key
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([result(metrics={"throughput_tokens_per_s": -1.0})]))
    before = snapshot(live_server.database)
    refused = subprocess.run(
        [*cmd[:3], str(bad), *cmd[4:]], capture_output=True, text=True, env=env, timeout=120
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr + refused.stdout
    assert "results[0].metrics.throughput_tokens_per_s" in refused.stdout
    assert snapshot(live_server.database) == before
    no_token = runner.invoke(
        app, ["results", "submit", str(good), "--server", live_server.url, "--token", "abl_x"]
    )
    assert no_token.exit_code == 1 and "401" in no_token.output


def test_submit_retries_5xx_and_gives_up_on_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers["idempotency-key"])
        if len(calls) < 3:
            return httpx.Response(503, json={"title": "Service Unavailable", "detail": "busy"})
        return httpx.Response(201, json={"run_ids": [7], "created": True})

    monkeypatch.setattr(results_cli.time, "sleep", lambda _s: None)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        response = results_cli.post_with_retries(
            client,
            "http://x/api/v1/results",
            b"{}",
            {"Idempotency-Key": "sha256:k"},
            retries=5,
            backoff_s=0.1,
        )
    assert response.status_code == 201 and calls == ["sha256:k"] * 3
    unreachable = runner.invoke(
        app, ["results", "submit", __file__, "--server", "http://127.0.0.1:1", "--retries", "0"]
    )
    assert unreachable.exit_code == 1


def test_idempotency_key_is_derived_from_content(tmp_path: Path) -> None:
    a = results_cli.idempotency_key(b'{"results": []}')
    assert a == results_cli.idempotency_key(b'{"results": []}') != results_cli.idempotency_key(b"{}")
    assert a.startswith("sha256:") and len(a) <= 200
    path = tmp_path / "one.json"
    path.write_text(json.dumps(result()))
    body, source = results_cli.load_batch(path)
    assert json.loads(body) == {"results": [result()]} and source == path.read_bytes()


def test_read_with_revoked_token_after_cli_revoke(live_server: LiveServer, client: httpx.Client) -> None:
    secret = make_token(live_server.database, "short-lived", "read")
    assert client.get("/runs", headers=auth(secret)).status_code == 200
    out = runner.invoke(app, ["token", "revoke", "short-lived", "--url", live_server.settings.database_url])
    assert out.exit_code == 0
    assert_problem(client.get("/runs", headers=auth(secret)), 401)


def test_release_list_and_a_cpu_release(
    live_server: LiveServer, tmp_path: Path, client: httpx.Client
) -> None:
    """`ablate release list` over the server, filtered; a CPU-only release says `platform: cpu`; an
    unknown release's error lists the tags there are."""
    empty = runner.invoke(app, ["release", "list", "--server", live_server.url])
    assert empty.exit_code == 0 and "no releases" in empty.output, empty.output
    path = tmp_path / "r.yaml"
    path.write_text(RELEASE_YAML)
    url = live_server.settings.database_url
    assert runner.invoke(app, ["release", "import", str(path), "--url", url]).exit_code == 0
    path.write_text("image: training-cpu-pytorch\ntag: '0.1'\nplatform: cpu\n")
    assert runner.invoke(app, ["release", "import", str(path), "--url", url]).exit_code == 0
    listed = runner.invoke(app, ["release", "list", "--server", live_server.url])
    assert listed.exit_code == 0, listed.output
    assert "training-xpu-pytorch:26.01" in listed.output and "training-cpu-pytorch:0.1" in listed.output
    cpu = runner.invoke(app, ["release", "list", "--platform", "cpu", "--json", "--server", live_server.url])
    assert [r["ref"] for r in json.loads(cpu.output)] == ["training-cpu-pytorch:0.1"]
    bad = runner.invoke(app, ["release", "list", "--platform", "tpu", "--server", live_server.url])
    assert bad.exit_code == 1 and "platform" in str(bad.exception)
    missing = client.get("/releases/training-xpu-pytorch:26.02").json()
    assert "does not exist; tags of training-xpu-pytorch: 26.01" in json.dumps(missing)
