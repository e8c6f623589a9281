"""`ablate ci run` against a live server: a real benchmark process, its output streamed and parsed,
one result stored with the CI context, failures recorded with their exit code, nothing lost when the
server is away."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ablate.backend.cli.ci_context import ci_provenance
from ablate.backend.server import bind_socket
from tests.api.conftest import auth
from tests.api.helpers import REF, create_release
from tests.support.live_server import LiveServer

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))
BENCH = str(Path(__file__).resolve().parents[1] / "support" / "fake_benchmark.py")

DEFINE = """\
# the plan's syntax: a cluster, workloads and variants (a plan's other keys are ignored)
release: training-nv-pytorch:25.12
cluster: {name: ci-cpu-1, accelerator: cpu, nodes: 1, devices_per_node: 1}
workloads:
  - {name: fake/llm, framework: fake, seq_len: 8192, global_batch: 1, warmup_steps: 1}
variants:
  - {name: Base, factors: []}
  - Base+ACCL
"""
CELL = ["--release", REF, "--cluster", "ci-cpu-1", "--workload", "fake/llm", "--variant", "Base"]
GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_RUN_ID": "4242",
    "GITHUB_RUN_ATTEMPT": "2",
    "GITHUB_SHA": "0123abcd",
    "GITHUB_REF_NAME": "main",
    "GITHUB_SERVER_URL": "https://github.example",
    "GITHUB_REPOSITORY": "team/images",
    "GITHUB_JOB": "bench",
}


def _env(token: str, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GITLAB_", "CI_", "BUILDKITE"))
    }
    env.pop("JENKINS_URL", None)
    return {**env, "ABLATE_TOKEN": token, **extra}


def ci_run(
    server: str,
    token: str,
    args: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    cmd = [ABLATE, "ci", "run", "--server", server, *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=cwd, env=env or _env(token), timeout=timeout, check=False
    )


def _runs(client: httpx.Client, token: str) -> list[dict[str, Any]]:
    page = client.get("/runs", params={"limit": 100}, headers=auth(token)).json()
    items = page["items"] if isinstance(page, dict) else page
    return sorted(
        (client.get(f"/runs/{r['id']}", headers=auth(token)).json() for r in items), key=lambda r: r["id"]
    )


def test_run_streams_parses_and_stores_with_the_ci_context(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    (tmp_path / "defs.yaml").write_text(DEFINE)
    args = [
        *CELL,
        "--define",
        "defs.yaml",
        "--parser",
        "jsonl",
        "--",
        sys.executable,
        BENCH,
        "--tokens-per-s",
        "1000",
    ]
    first = ci_run(live_server.url, submit_token, args, tmp_path, env=_env(submit_token, **GITHUB))
    assert first.returncode == 0, first.stdout + first.stderr
    # The benchmark's own output is in the job's log, stdout and stderr each where they belong.
    assert '"step": 5' in first.stdout and "fake benchmark done" in first.stderr
    assert "stored as run 1 (succeeded run" in first.stdout
    files = list(tmp_path.glob("ablate-result-*.json"))
    assert len(files) == 1 and str(files[0]) in first.stdout
    second = ci_run(live_server.url, submit_token, args, tmp_path)
    assert second.returncode == 0, second.stderr
    runs = _runs(client, submit_token)
    assert [(r["repeat"], r["status"], r["source"]) for r in runs] == [
        (0, "succeeded", "ci"),
        (1, "succeeded", "ci"),
    ]
    run = runs[0]
    metrics = {m["name"]: m["value"] for m in run["metrics"]}
    # Step 1 is warm-up (the workload says so): the median of steps 2-5 of 1000 +-1%.
    assert metrics["throughput_tokens_per_s"] == pytest.approx(1000.0, rel=0.011)
    assert metrics["step_time_s"] == pytest.approx(8.192, rel=0.011) and metrics["elapsed_s"] > 0
    assert run["provenance"]["ci"] == "github-actions" and run["provenance"]["ci_run_id"] == "4242"
    assert run["provenance"]["ci_run_attempt"] == "2" and run["provenance"]["ci_commit"] == "0123abcd"
    assert run["provenance"]["ci_branch"] == "main" and run["provenance"]["warmup_steps"] == "1"
    assert (
        run["provenance"]["ci_job_url"] == "https://github.example/team/images/actions/runs/4242/attempts/2"
    )
    assert run["provenance"]["parser"] == "jsonl" and "fake_benchmark.py" in run["provenance"]["command"]
    assert run["started_at"] and run["finished_at"] and run["finished_at"] >= run["started_at"]
    assert "fake benchmark done" in run["log_tail"]
    # The entries the file defined now exist: later jobs may name them alone.
    assert client.get("/clusters/ci-cpu-1").json()["accelerator"] == "cpu"
    by_name = ci_run(
        live_server.url, submit_token, [*CELL, "--parser", "jsonl", "--", sys.executable, BENCH], tmp_path
    )
    assert by_name.returncode == 0 and "repeat" not in by_name.stderr


def test_failing_command_is_recorded_and_its_exit_code_passes_through(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    (tmp_path / "defs.yaml").write_text(DEFINE)
    args = [*CELL, "--define", "defs.yaml", "--parser", "jsonl", "--", sys.executable, BENCH, "--fail", "7"]
    failed = ci_run(live_server.url, submit_token, args, tmp_path)
    assert failed.returncode == 7, failed.stdout + failed.stderr
    assert "CUDA out of memory (fake)" in failed.stderr and "stored as run 1 (failed run" in failed.stdout
    (run,) = _runs(client, submit_token)
    assert run["status"] == "failed" and run["failure_kind"] == "benchmark"
    assert (
        run["error"].startswith("command exit code 7: ")
        and "RuntimeError: CUDA out of memory" in run["error"]
    )
    assert run["metrics"] == []
    # A command that prints nothing the parser reads: a failed run, exit 1, saying what the parser saw.
    quiet = ci_run(
        live_server.url,
        submit_token,
        [*CELL, "--parser", "jsonl", "--", sys.executable, "-c", "print('hi')"],
        tmp_path,
    )
    assert quiet.returncode == 1 and "printed no metrics: parser jsonl found no metrics" in quiet.stderr
    assert [r["status"] for r in _runs(client, submit_token)] == ["failed", "failed"]
    # A command that cannot start: exit 127 as a shell would, nothing recorded.
    missing = ci_run(
        live_server.url, submit_token, [*CELL, "--parser", "jsonl", "--", "/nonexistent/bench"], tmp_path
    )
    assert missing.returncode == 127 and "cannot start command '/nonexistent/bench'" in missing.stderr
    assert len(_runs(client, submit_token)) == 2


def test_unknown_names_and_duplicates_are_refused_before_and_after(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    marker = tmp_path / "ran"
    bench = ["--", sys.executable, BENCH, "--touch", str(marker)]
    unknown = ci_run(live_server.url, submit_token, [*CELL, "--parser", "jsonl", *bench], tmp_path)
    assert unknown.returncode == 1 and "cluster 'ci-cpu-1' does not exist" in unknown.stderr
    assert "--define FILE" in unknown.stderr and not marker.exists()  # refused before the benchmark ran
    other = [*CELL[:1], "training-nv-pytorch:99.99", *CELL[2:]]
    no_release = ci_run(live_server.url, submit_token, [*other, "--parser", "jsonl", *bench], tmp_path)
    assert no_release.returncode == 1 and "ablate release import" in no_release.stderr and not marker.exists()
    (tmp_path / "defs.yaml").write_text(DEFINE)
    args = [*CELL, "--define", "defs.yaml", "--parser", "jsonl", "--repeat", "3", *bench]
    assert ci_run(live_server.url, submit_token, args, tmp_path).returncode == 0
    dup = ci_run(live_server.url, submit_token, args, tmp_path)
    assert dup.returncode == 1 and "repeat 3 of this cell is already stored as run 1" in dup.stderr
    assert [r["repeat"] for r in _runs(client, submit_token)] == [3]
    # A definition that differs from the stored one: refused naming the field.
    (tmp_path / "defs.yaml").write_text(DEFINE.replace("seq_len: 8192", "seq_len: 4096"))
    changed = ci_run(
        live_server.url, submit_token, [*CELL, "--define", "defs.yaml", "--parser", "jsonl", *bench], tmp_path
    )
    assert changed.returncode == 1 and "results[0].workload.seq_len: differs" in changed.stderr
    bad = ci_run(live_server.url, submit_token, [*CELL, "--parser", "nope", *bench], tmp_path)
    assert bad.returncode == 2 and "unknown parser 'nope'" in bad.stderr


def test_log_file_is_parsed_instead_of_a_command(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    (tmp_path / "defs.yaml").write_text(DEFINE)
    log = tmp_path / "bench.log"
    log.write_text(
        subprocess.run(
            [sys.executable, BENCH, "--tokens-per-s", "500"], capture_output=True, text=True
        ).stdout
    )
    done = ci_run(
        live_server.url,
        submit_token,
        [*CELL, "--define", "defs.yaml", "--parser", "jsonl", "--log", str(log)],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (run,) = _runs(client, submit_token)
    assert {m["name"]: m["value"] for m in run["metrics"]}["throughput_tokens_per_s"] == pytest.approx(
        500, rel=0.011
    )
    assert run["provenance"]["log_file"] == str(log)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_is_lost_when_the_server_is_away(
    live_server: LiveServer, admin: httpx.Client, client: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    create_release(admin)
    (tmp_path / "defs.yaml").write_text(DEFINE)
    out = tmp_path / "keep" / "result.json"
    args = [*CELL, "--define", "defs.yaml", "--parser", "jsonl", "--out", str(out), "--retry-for", "1"]
    away = ci_run(
        f"http://127.0.0.1:{_free_port()}", submit_token, [*args, "--", sys.executable, BENCH], tmp_path
    )
    assert away.returncode == 2, away.stdout + away.stderr
    assert "cannot reach" in away.stderr and f"ablate results submit {out}" in away.stderr.replace("\n", "")
    assert json.loads(out.read_text())["results"][0]["status"] == "succeeded"
    # Later, from the file: stored once, however often it is sent.
    send = [ABLATE, "results", "submit", str(out), "--server", live_server.url]
    env = _env(submit_token)
    first = subprocess.run(send, capture_output=True, text=True, env=env, timeout=120, check=False)
    again = subprocess.run(send, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert first.returncode == 0 and "stored: runs 1" in first.stdout, first.stdout + first.stderr
    assert again.returncode == 0 and "already stored: runs 1" in again.stdout
    assert len(_runs(client, submit_token)) == 1


def test_a_server_that_comes_back_within_the_retries_gets_the_result(
    live_server: LiveServer, admin: httpx.Client, submit_token: str, tmp_path: Path
) -> None:
    """The server is down when the benchmark ends and back a few seconds later: stored, once."""
    create_release(admin)
    (tmp_path / "defs.yaml").write_text(DEFINE)
    port = _free_port()
    later: list[LiveServer] = []

    def start_later() -> None:
        time.sleep(3.0)
        later.append(_serve_on(live_server, port))

    starter = threading.Thread(target=start_later)
    args = [
        *CELL,
        "--define",
        "defs.yaml",
        "--parser",
        "jsonl",
        "--retry-for",
        "60",
        "--",
        sys.executable,
        BENCH,
    ]
    starter.start()
    try:
        done = ci_run(f"http://127.0.0.1:{port}", submit_token, args, tmp_path)
    finally:
        starter.join()
        for server in later:
            server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored as run 1" in done.stdout


def _serve_on(live: LiveServer, port: int) -> LiveServer:
    """A second server of the same database on a given port."""
    from ablate.backend.api.app import create_app
    from ablate.backend.db.database import Database
    from ablate.backend.server import start_background_server

    database = Database.from_url(live.settings.database_url)
    app = create_app(live.settings, database, run_dispatcher=False)
    background = start_background_server(app, bind_socket("127.0.0.1", port), ready_timeout_s=30)
    return LiveServer(
        url=background.url, app=app, database=database, settings=live.settings, _background=background
    )


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {"GITLAB_CI": "true", "CI_PIPELINE_ID": "77", "CI_JOB_ID": "901", "CI_COMMIT_SHA": "beef",
             "CI_COMMIT_REF_NAME": "rel/25.12", "CI_JOB_URL": "https://gl.example/g/p/-/jobs/901"},
            {"ci": "gitlab-ci", "ci_run_id": "77", "ci_job_id": "901", "ci_commit": "beef",
             "ci_branch": "rel/25.12", "ci_job_url": "https://gl.example/g/p/-/jobs/901"},
        ),
        (
            {"JENKINS_URL": "https://j.example/", "BUILD_NUMBER": "12", "GIT_COMMIT": "cafe",
             "GIT_BRANCH": "origin/main", "BUILD_URL": "https://j.example/job/bench/12/"},
            {"ci": "jenkins", "ci_run_id": "12", "ci_commit": "cafe", "ci_branch": "origin/main",
             "ci_job_url": "https://j.example/job/bench/12/"},
        ),
        (
            {"BUILDKITE": "true", "BUILDKITE_BUILD_NUMBER": "5", "BUILDKITE_RETRY_COUNT": "1",
             "BUILDKITE_COMMIT": "f00d", "BUILDKITE_BRANCH": "main",
             "BUILDKITE_BUILD_URL": "https://buildkite.com/o/p/builds/5", "BUILDKITE_JOB_ID": "j-1"},
            {"ci": "buildkite", "ci_run_id": "5", "ci_run_attempt": "2", "ci_commit": "f00d",
             "ci_branch": "main", "ci_job_url": "https://buildkite.com/o/p/builds/5#j-1"},
        ),
        ({}, {}),
    ],
)  # fmt: skip
def test_ci_context_of_each_ci_system(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: dict[str, str]
) -> None:
    for name in list(os.environ):
        if name.startswith(("GITHUB_", "GITLAB_", "CI_", "BUILDKITE", "JENKINS", "BUILD_", "GIT_")):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert ci_provenance() == expected
