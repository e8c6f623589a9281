"""`ablate study`: submit a plan over HTTP and follow it to the end, against a real server whose
in-process dispatcher runs the study on a local Ray; list, show, logs and cancel read it back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.backend.api.app import create_app
from ablate.backend.db.database import Database
from ablate.backend.schemas.catalog import ReleaseCreate
from ablate.backend.server import BackgroundServer, bind_socket, start_background_server
from ablate.backend.services import catalog
from tests.api.conftest import make_token
from tests.workers.conftest import make_settings

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))
RELEASE = "training-nv-pytorch:25.12"
# A benchmark that prints two JSONL step records, and one that fails the way a broken image does.
STEPS = (
    "python3 -c \"import json; [print(json.dumps({'step': i, 'throughput_tokens_per_s': 1000.0 + i}))"
    ' for i in (1, 2)]"'
)
BROKEN = "sh -c 'echo cannot open libaccl.so >&2; exit 3'"


def _plan(tmp_path: Path, **overrides: object) -> Path:
    plan: dict[str, object] = {
        "name": "cli ladder",
        "release": RELEASE,
        "cluster": {"name": "cpu-cli", "accelerator": "cpu", "nodes": 1, "devices_per_node": 1},
        "variants": [
            {"name": "cli-ok", "position": 0},
            {"name": "cli-broken", "position": 1, "runner_options": {"command": BROKEN}},
        ],
        "workloads": [
            {
                "name": "cli-cmd",
                "runner": "command",
                "parser": "jsonl",
                "warmup_steps": 0,
                "runner_options": {"command": STEPS},
            }
        ],
        "repeats": 1,
        "order_seed": 3,
    }
    plan.update(overrides)
    path = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*.json')))}.json"  # one file per plan
    path.write_text(json.dumps(plan))
    return path


def _ablate(*args: str, token: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABLATE_")}
    if token:
        env["ABLATE_TOKEN"] = token
    return subprocess.run([ABLATE, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def served(ray_local: str, database: Database, tmp_path: Path) -> tuple[BackgroundServer, str]:
    with database.transaction() as s:
        catalog.create_release(s, ReleaseCreate(image="training-nv-pytorch", tag="25.12", platform="gpu"))
    app = create_app(make_settings(tmp_path), database, run_dispatcher=True)
    server = start_background_server(app, bind_socket("127.0.0.1", 0))
    yield server, make_token(database, "cli-admin", "admin")
    server.stop()


def test_submit_wait_reports_each_run_and_exits_with_the_outcome(
    served: tuple[BackgroundServer, str], tmp_path: Path
) -> None:
    server, admin = served
    done = _ablate(
        "study",
        "submit",
        str(_plan(tmp_path)),
        "--wait",
        "--poll",
        "0.3",
        "--server",
        server.url,
        token=admin,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr  # one run failed: the study failed
    assert "2 runs queued on cpu-cli" in out
    assert "warning: repeats=1 is below 5" in done.stderr  # the plan is accepted, and says what it lacks
    assert "cli-ok / cli-cmd r0: succeeded" in out
    # The reason carries the command's own last words, not only its exit code.
    assert "cli-broken / cli-cmd r0: failed (benchmark): command exit code 3: cannot open libaccl.so" in out
    study_id = out.split("study ", 1)[1].split(" ", 1)[0]
    assert f"study {study_id} failed: 1 failed, 1 succeeded" in out

    shown = _ablate("study", "show", study_id, "--server", server.url)
    assert shown.returncode == 0, shown.stderr
    assert (
        "cli-broken / cli-cmd r0: failed (benchmark): command exit code 3" in shown.stdout
        and "cli-ok" in shown.stdout
    )
    listed = _ablate("study", "list", "--server", server.url)
    assert listed.returncode == 0 and "cli ladder" in listed.stdout
    run_id = next(
        line.split()[1] for line in out.splitlines() if "cli-broken" in line and line.startswith("run ")
    )
    logs = _ablate("study", "logs", run_id, "--server", server.url)
    assert logs.returncode == 0 and "error: command exit code 3" in logs.stdout
    assert "cannot open libaccl.so" in logs.stdout  # the log tail
    assert "attempt 1: failed (command exit code 3: cannot open libaccl.so)" in logs.stdout
    assert "  log file node0.log: node 0 on " in logs.stdout
    whole = _ablate("study", "logs", run_id, "--node", "0", "--server", server.url)
    assert whole.returncode == 0 and "== node0.log (attempt 1, host " in whole.stdout
    assert "cannot open libaccl.so" in whole.stdout  # the file itself
    picked = _ablate("study", "logs", run_id, "--node", "0", "--attempt", "1", "--server", server.url)
    assert picked.returncode == 0 and picked.stdout == whole.stdout
    missing = _ablate("study", "logs", run_id, "--node", "3", "--server", server.url)
    assert missing.returncode == 1
    assert "has no log file of node 3 in attempt 1 (log files of nodes: [0])" in missing.stderr
    no_attempt = _ablate("study", "logs", run_id, "--node", "0", "--attempt", "2", "--server", server.url)
    assert no_attempt.returncode == 1
    assert f"run {run_id} has no attempt 2 (attempts: [1])" in no_attempt.stderr
    cancelled = _ablate("study", "cancel", study_id, "--server", server.url, token=admin)
    assert cancelled.returncode == 0 and f"study {study_id} failed" in cancelled.stdout  # finished stays


def test_a_succeeding_study_exits_zero_and_mistakes_exit_one_with_one_line(
    served: tuple[BackgroundServer, str], tmp_path: Path
) -> None:
    server, admin = served
    ok = _plan(tmp_path, variants=[{"name": "cli-ok", "position": 0}])
    done = _ablate("study", "submit", str(ok), "--wait", "--poll", "0.3", "--server", server.url, token=admin)
    assert done.returncode == 0, done.stdout + done.stderr

    bad = _plan(tmp_path, repeats=0)
    refused = _ablate("study", "submit", str(bad), "--server", server.url, token=admin)
    assert refused.returncode == 1 and f"{bad}: repeats:" in refused.stderr, refused.stderr
    typo = _plan(tmp_path, worklaods=[])
    refused = _ablate("study", "submit", str(typo), "--server", server.url, token=admin)
    assert refused.returncode == 1 and "worklaods" in refused.stderr, refused.stderr
    no_scheme = _ablate("study", "list", "--server", server.url.removeprefix("http://"))
    assert no_scheme.returncode == 1 and "needs a scheme" in no_scheme.stderr
    no_admin = _ablate("study", "submit", str(ok), "--server", server.url)
    assert no_admin.returncode == 1 and "HTTP 401" in no_admin.stderr, no_admin.stderr
    missing = _ablate("study", "show", "999999", "--server", server.url)
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr
    assert "Traceback" not in refused.stderr + no_scheme.stderr + no_admin.stderr + missing.stderr
