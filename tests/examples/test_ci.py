"""examples/ci/ and examples/results/: the scripts are valid bash, the sample batch follows the contract,
and both submission scripts really store it through a live server on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from ablate.backend.cli.releases import load_release_file
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.schemas.results import ResultsBatch
from ablate.backend.services import catalog, tokens
from tests.examples.helpers import ABLATE, DEMO_RELEASE, EXAMPLE_RELEASE, EXAMPLES, SAMPLE_RESULTS, load_yaml
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
    example = load_yaml(EXAMPLE_RELEASE)
    demo = load_yaml(DEMO_RELEASE)
    for result in batch.results:
        # Synthetic values for the example release: never claimed for a real release, nor the demo's.
        assert result.release == f"{example['image']}:{example['tag']}"
        assert not str(result.release).startswith(f"{demo['image']}:")
        assert result.provenance.get("synthetic") is True
        assert result.metrics and result.series and result.started_at and result.finished_at
    for key in ("release", "cluster", "workload", "variant", "repeat", "metrics", "series", "provenance"):
        assert all(key in r for r in raw["results"])


def test_workflow_runs_a_benchmark_and_submits_it(tmp_path: Path) -> None:
    workflow = load_yaml(WORKFLOW)
    steps = workflow["jobs"]["benchmark"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "ljperf benchmark --model deepspeed/llama3-8b" in runs
    assert "/api/v1/results" in runs and "Idempotency-Key" in runs and "Authorization: Bearer" in runs

    # The conversion step is real code: run it on a log in the assumed format and validate the output.
    convert = next(s for s in steps if "result.json" in s.get("run", "") and "python3" in s["run"])
    script = re.search(r"<<'PY'\n(.*?)\n\s*PY\n", convert["run"], re.S)
    assert script is not None
    code = textwrap.dedent(script.group(1))
    log = "".join(
        f"step {i}/8 | loss {3 - i * 0.1:.2f} | step_time 2.0 s | tokens/s {8000 + i}.0 | mem 60.{i} GiB\n"
        for i in range(1, 9)
    )
    (tmp_path / "ljperf.log").write_text("starting\n" + log, encoding="utf-8")
    (tmp_path / "started_at").write_text("2026-01-01T10:00:00Z\n", encoding="utf-8")
    (tmp_path / "finished_at").write_text("2026-01-01T10:05:00Z\n", encoding="utf-8")
    env = {
        "PATH": os.environ["PATH"],
        "WARMUP_STEPS": "5",
        "RELEASE": "training-nv-pytorch:25.12",
        "CI_RUN": "123",
        "REPEAT": "1",
        "IMAGE": "training-nv-pytorch:25.12",
    }
    proc = subprocess.run(["python3", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    batch = ResultsBatch.model_validate_json((tmp_path / "result.json").read_text(encoding="utf-8"))
    (result,) = batch.results
    assert result.metrics["throughput_tokens_per_s"] == pytest.approx(8007.0)  # steps 6-8, after warm-up
    assert result.series["loss"].steps == list(range(1, 9))
    assert result.repeat == 0


@pytest.fixture
def server(db_url: str, database: Database) -> Iterator[tuple[LiveServer, str]]:
    with database.transaction() as session:
        catalog.import_release(session, load_release_file(EXAMPLE_RELEASE))
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
