"""`ablate demo`'s progress lines (in its log file, and on stdout when that is not a terminal), and
Ctrl-C: the demo stops its runs, its dispatcher, its server and Ray, and leaves no process behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import IO

import psutil
import pytest
from sqlalchemy import select

from ablate.backend.cli import demo as demo_cli
from ablate.backend.db.database import Database
from ablate.backend.db.models import Run
from ablate.backend.services import demo as demo_service

from .test_demo import ABLATE

MARKER = "ABLATE_TEST_DEMO_STOP"  # set by the test, inherited by everything the demo starts


def test_watch_writes_what_each_run_became_to_the_log_file(database: Database, tmp_path: Path) -> None:
    with database.transaction() as s:
        study = demo_service.create_demo_study(s, repeats=1)
        study_id = study.id
        runs = sorted(study.runs, key=lambda r: r.queue_order)
        runs[0].status, runs[0].latest_throughput = "succeeded", 1234.4
        runs[1].status, runs[1].error = "failed", "torch_llm exited with exit code 1\nTraceback ..."
        for r in runs[2:]:
            r.status = "cancelled"
        first = (runs[0].variant.name, runs[0].repeat, runs[0].id)
    log = demo_cli.ProgressLog(tmp_path / "demo" / "demo.log")
    matrix = demo_cli._watch(database, study_id, log)
    log.close()
    assert {r["status"] for r in matrix["runs"]} == {"succeeded", "failed", "cancelled"}
    text = (tmp_path / "demo" / "demo.log").read_text(encoding="utf-8")
    lines = [line.split(" ", 2)[2] for line in text.splitlines()]  # without the date and time
    assert lines[0] == f"study {study_id}: 4 runs, queued"
    assert lines[1] == f"run 1/4 done: {first[0]} repeat {first[1]} (run {first[2]}), 1,234 tokens/s"
    assert lines[2].startswith("run 2/4 failed: ") and lines[2].endswith(
        ": torch_llm exited with exit code 1"
    )
    assert [line.split(":")[0] for line in lines[3:]] == ["run 3/4 cancelled", "run 4/4 cancelled"]


def test_progress_lines_say_what_changed_since_the_last_look() -> None:
    def matrix(study: str, *statuses: str) -> dict[str, object]:
        runs = [
            {
                "id": i + 1,
                "variant": "Base",
                "repeat": i,
                "status": s,
                "latest_throughput": 900.0,
                "error": None,
            }
            for i, s in enumerate(statuses)
        ]
        return {"id": 3, "status": study, "runs": runs}

    lines = demo_service.ProgressLines()
    assert lines.update(matrix("queued", "queued", "queued")) == ["study 3: 2 runs, queued"]
    assert lines.update(matrix("running", "running", "queued")) == [
        "run started: Base repeat 0 (run 1)",
        "study 3: running",
    ]
    assert lines.update(matrix("running", "running", "queued")) == []
    assert lines.update(matrix("running", "succeeded", "running")) == [
        "run 1/2 done: Base repeat 0 (run 1), 900 tokens/s",
        "run started: Base repeat 1 (run 2)",
    ]
    # A run given back to the queue (its dispatcher stopped) says so.
    assert lines.update(matrix("running", "succeeded", "queued")) == [
        "run queued again: Base repeat 1 (run 2)"
    ]
    assert lines.update(matrix("succeeded", "succeeded", "succeeded")) == [
        "run 2/2 done: Base repeat 1 (run 2), 900 tokens/s",
        "study 3: succeeded",
    ]


def _marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries the test's marker (the demo and all it started)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(MARKER) == marker:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _describe(procs: list[psutil.Process]) -> str:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(str(p.pid))
    return "; ".join(out)


def _start(env: dict[str, str], data_dir: Path) -> tuple[subprocess.Popen[bytes], IO[str]]:
    data_dir.mkdir(parents=True)
    out = (data_dir / "stdout.txt").open("w")
    # A session of its own, like a shell's job: Ctrl-C is SIGINT to the job's process group.
    demo = subprocess.Popen(
        [ABLATE, "demo", "--no-serve", "--repeats", "1"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return demo, out


def _stop(demo: subprocess.Popen[bytes], out: IO[str], marker: str) -> None:
    """Never leave a failed test's processes on the machine."""
    if demo.poll() is None:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
    for p in _marked(marker):
        with contextlib.suppress(psutil.Error):
            p.kill()
    out.close()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_ctrl_c_cancels_the_runs_and_leaves_no_process_behind(tmp_path: Path, how: str) -> None:
    marker = uuid.uuid4().hex
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "ABLATE_DATA_DIR": str(tmp_path), "ABLATE_PORT": str(port), MARKER: marker}
    env.pop("ABLATE_DATABASE_URL", None)
    env.pop("RAY_ADDRESS", None)
    for attempt in range(3):
        data_dir = tmp_path / f"attempt-{attempt}"
        env["ABLATE_DATA_DIR"] = str(data_dir)
        demo, out = _start(env, data_dir)
        log = data_dir / "demo" / "ablate-demo_0.1.log"
        try:
            deadline = time.monotonic() + 600  # Ray's start and torch's import are slow on a loaded box
            while not (log.exists() and "run started:" in log.read_text(encoding="utf-8")):
                if demo.poll() is not None:
                    break
                assert time.monotonic() < deadline, "no run started"
                time.sleep(0.5)
        except BaseException:
            _stop(demo, out, marker)
            raise
        if demo.poll() is None:
            break
        _stop(demo, out, marker)
        stdout = (data_dir / "stdout.txt").read_text()
        # Ray gives its node 30 s to register, hard-coded: an overloaded machine can miss that.
        assert "timed out during startup" in stdout, stdout
    else:
        pytest.fail("Ray did not start in 3 tries")
    try:
        database = Database.from_url(f"sqlite:///{data_dir / 'ablate.sqlite'}")
        with database.read() as s:
            running = list(s.scalars(select(Run.id).where(Run.status == "running")))
        assert running
        # The runner of a run leads a session of its own, so Ctrl-C does not reach it by itself.
        runners = [p for p in _marked(marker) if "ablate.workers.runners" in " ".join(p.cmdline())]
        deadline = time.monotonic() + 120
        while not runners and time.monotonic() < deadline:
            time.sleep(0.5)
            runners = [p for p in _marked(marker) if "ablate.workers.runners" in " ".join(p.cmdline())]
        assert runners, _describe(_marked(marker))

        asked = time.monotonic()
        if how == "ctrl-c":  # a terminal's Ctrl-C: SIGINT to the foreground job's process group
            os.killpg(demo.pid, signal.SIGINT)
        else:  # `kill PID`
            os.kill(demo.pid, signal.SIGTERM)
        code = demo.wait(timeout=30)  # 1.4 s on a loaded 2-core box; Ray's own shutdown took 17 s idle
        took = time.monotonic() - asked
        deadline = time.monotonic() + 60
        while (left := _marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == [], f"left running: {_describe(left)}"
    finally:
        _stop(demo, out, marker)
    stdout = (data_dir / "stdout.txt").read_text()
    assert code == 130, stdout
    assert "Traceback" not in stdout
    assert f"progress log: {log}" in stdout
    text = log.read_text(encoding="utf-8")
    assert "interrupted: the study's remaining runs are cancelled" in text
    stopped = re.search(r"stopped (\d+\.\d) s after the end was asked for \(exit code 130\)", text)
    assert stopped, text
    print(f"Ctrl-C to exit: {took:.1f} s; the demo's own teardown: {stopped.group(1)} s")
    with database.read() as s:
        assert not list(s.scalars(select(Run.id).where(Run.status.in_(["running", "queued"]))))
        assert {r for r in s.scalars(select(Run.status).where(Run.id.in_(running)))} == {"cancelled"}
    database.dispose()
