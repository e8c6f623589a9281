"""examples/ci/ and examples/results/: the scripts are valid bash, the sample batch follows the contract,
both submission scripts really store it through a live server on SQLite and PostgreSQL, and the
GitHub workflow's shell steps run the whole CI loop (benchmark, store, gate) against a live server."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import catalog, tokens
from tests.examples.helpers import (
    ABLATE,
    CI_RESULTS_RELEASE,
    DEMO_RELEASE,
    EXAMPLES,
    NV_2512,
    PLANS,
    ROOT,
    SAMPLE_RESULTS,
    load_yaml,
)
from tests.support.live_server import LiveServer, start_live_server

CI = EXAMPLES / "ci"
SCRIPTS = [CI / "submit_curl.sh", CI / "submit_cli.sh"]
WORKFLOW = CI / "github-actions.yml"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_valid_bash(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert os.access(script, os.X_OK), f"{script.name} should be executable"
    assert "set -euo pipefail" in script.read_text(encoding="utf-8")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_says_what_it_needs(script: Path, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode != 0
    assert "usage" in proc.stderr


def test_sample_results_follow_the_contract() -> None:
    raw = json.loads(SAMPLE_RESULTS.read_text(encoding="utf-8"))
    batch = ResultsBatch.model_validate(raw)
    example = load_yaml(CI_RESULTS_RELEASE)
    demo = load_yaml(DEMO_RELEASE)
    for result in batch.results:
        # Synthetic values for the example release: never claimed for a real release, nor the demo's.
        assert result.release == f"{example['image']}:{example['tag']}"
        assert not str(result.release).startswith(f"{demo['image']}:")
        assert result.provenance.get("synthetic") is True
        assert result.metrics and result.series and result.started_at and result.finished_at
    for key in ("release", "cluster", "workload", "variant", "repeat", "metrics", "series", "provenance"):
        assert all(key in r for r in raw["results"])


GITLAB = CI / "gitlab-ci.yml"
PLAN = PLANS / "gpu-ladder-nv-25.12.yaml"
FAKE = ROOT / "tests" / "support" / "fake_benchmark.py"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _no_inline_parsing(script: str) -> None:
    """Only Ablate's commands: no python snippets, regular expressions or hand-made JSON."""
    for forbidden in ("python3 -c", "python -c", "<<", "re.compile", "json.dump", "curl", "/api/v1/"):
        assert forbidden not in script, forbidden


def test_gitlab_file_uses_only_ablate_commands() -> None:
    pipeline = load_yaml(GITLAB)
    scripts = [
        line
        for job in ("benchmark", "gate")
        for line in pipeline[job]["script"] + pipeline[pipeline[job]["extends"]]["before_script"]
    ]
    for line in scripts:
        _no_inline_parsing(line)
        proc = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("ablate ci run ") for line in scripts)
    assert any(line.startswith("ablate ci check ") for line in scripts)
    matrix = pipeline["benchmark"]["parallel"]["matrix"]
    assert {m["VARIANT"] for m in matrix} <= {v["name"] for v in load_yaml(PLAN)["variants"]}


def _expand(text: str, values: dict[str, str]) -> str:
    """GitHub's ${{ ... }} expressions of the workflow, for the values the test chose."""
    return EXPRESSION.sub(lambda m: values[m.group(1)], text)


def _run_job(job: dict[str, Any], workflow_env: dict[str, str], values: dict[str, str], cwd: Path,
             env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:  # fmt: skip
    """The job's shell steps as the runner runs them (bash -e -o pipefail), the CLI's install skipped."""
    done = []
    for step in job["steps"]:
        if "run" not in step or step["name"].startswith("Install"):
            continue
        step_env = {k: _expand(str(v), values) for k, v in {**workflow_env, **step.get("env", {})}.items()}
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _expand(step["run"], values)],
            cwd=cwd, env={**env, **step_env}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        done.append(proc)
        if proc.returncode:
            break
    return done


def test_github_workflow_runs_the_loop_against_a_live_server(
    db_url: str, database: Database, tmp_path: Path
) -> None:
    """The workflow's shell steps, run as GitHub would, with `docker run ... ljperf` standing in as a
    fake benchmark: three repeats of a rung stored with the CI context, then the gate fails on the
    drop against the previous release and writes its table to the job summary."""
    workflow = load_yaml(WORKFLOW)
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            _no_inline_parsing(step.get("run", ""))
    with database.transaction() as session:
        for tag, day in (("25.11", 15), ("25.12", 16)):
            spec = load_release_file(NV_2512).model_copy(update={"tag": tag})
            spec = spec.model_copy(
                update={"release_date": spec.release_date.replace(day=day) if spec.release_date else None}
            )
            catalog.import_release(session, spec)
        _, secret = tokens.create_token(session, "ci-example", "submit")
    live = start_live_server(db_url)
    try:
        (tmp_path / ".ablate").mkdir()
        shutil.copy(PLAN, tmp_path / ".ablate" / "catalog.yaml")
        shim = tmp_path / "bin"
        shim.mkdir()
        docker = shim / "docker"
        speed = tmp_path / "tokens_per_s"
        docker.write_text(
            "#!/bin/sh\n"
            f'exec "{sys.executable}" "{FAKE}" --format ljperf --steps 8 '
            f'--tokens-per-s "$(cat {speed})" "$@"\n'
        )
        docker.chmod(0o755)
        summary = tmp_path / "summary.md"
        env = {
            "PATH": f"{shim}:{Path(ABLATE).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "GITHUB_ACTIONS": "true",
            "GITHUB_RUN_ID": "777",
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_SHA": "abc123",
            "GITHUB_REF_NAME": "main",
            "GITHUB_REPOSITORY": "team/training-images",
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        rung = {"variant": "AC2+ACCL+CompilerOpt+CkptOpt", "ckpt": "true"}
        for tag, tokens_per_s in (("25.11", "10000"), ("25.12", "9000")):
            speed.write_text(tokens_per_s)
            values = {
                "secrets.ABLATE_SERVER_URL": live.url,
                "secrets.ABLATE_TOKEN": secret,
                "inputs.tag": tag,
                "matrix.rung.variant": rung["variant"],
                "matrix.rung.ckpt": rung["ckpt"],
            }
            for _ in range(3):  # the matrix's repeats of this rung
                (done,) = _run_job(workflow["jobs"]["benchmark"], workflow["env"], values, tmp_path, env)
                assert done.returncode == 0, done.stdout + done.stderr
                assert "step 8/8" in done.stdout and "stored as run" in done.stdout
        gate = _run_job(workflow["jobs"]["gate"], workflow["env"], values, tmp_path, env)
        assert len(gate) == 1 and gate[0].returncode == 1, gate[0].stdout + gate[0].stderr
        table = (tmp_path / "gate.md").read_text()
        assert summary.read_text() == table + "\n"
        assert "against `training-nv-pytorch:25.11`: failed" in table
        assert (
            "| **regressed** | gpu-1x8 | ljperf-llama3-8b | AC2+ACCL+CompilerOpt+CkptOpt | "
            "throughput_tokens_per_s | -10.00% |" in table
        )
    finally:
        live.stop()
    with database.read() as session:
        runs = session.scalars(select(Run).order_by(Run.id)).all()
        assert [(r.release.tag, r.repeat, r.status) for r in runs] == [
            *[("25.11", i, "succeeded") for i in range(3)],
            *[("25.12", i, "succeeded") for i in range(3)],
        ]
        assert runs[-1].provenance["ci_run_id"] == "777" and runs[-1].provenance["ci_commit"] == "abc123"
        assert runs[-1].environment == {}


@pytest.fixture
def server(db_url: str, database: Database) -> Iterator[tuple[LiveServer, str]]:
    with database.transaction() as session:
        catalog.import_release(session, load_release_file(CI_RESULTS_RELEASE))
        _, secret = tokens.create_token(session, "ci-example", "submit")
    live = start_live_server(db_url)
    try:
        yield live, secret
    finally:
        live.stop()


def _stored(database: Database) -> list[tuple[str, str, int]]:
    with database.read() as session:
        runs = session.scalars(select(Run).order_by(Run.id)).all()
        return [(run.variant.name, run.status, run.repeat) for run in runs]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_then_cli_submit_the_same_batch_once(
    server: tuple[LiveServer, str], database: Database, tmp_path: Path
) -> None:
    live, secret = server
    env = {
        "PATH": f"{Path(ABLATE).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "ABLATE_SERVER_URL": live.url,
        "ABLATE_TOKEN": secret,
        "ABLATE_DATA_DIR": str(tmp_path / "data"),
    }
    first = subprocess.run(
        ["bash", str(CI / "submit_curl.sh"), str(SAMPLE_RESULTS)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr + first.stdout
    body = json.loads(first.stdout)
    assert body["created"] is True and len(body["run_ids"]) == 4
    assert _stored(database) == [
        ("Base", "succeeded", 0),
        ("Base", "succeeded", 1),
        ("+CompilerOpt", "succeeded", 0),
        ("+CompilerOpt", "succeeded", 1),
    ]

    # The CLI derives the same Idempotency-Key from the file: the server recognises the repeat.
    again = subprocess.run(
        ["bash", str(CI / "submit_cli.sh"), live.url, str(SAMPLE_RESULTS)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr + again.stdout
    assert "already stored" in again.stdout
    assert " ".join(map(str, body["run_ids"])) in again.stdout
    assert len(_stored(database)) == 4
