"""The real `ablate` console script: migrations, and one clear line for every bad input."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from ablate.backend.db.session import make_engine

ABLATE = shutil.which("ablate") or str(Path(sys.executable).with_name("ablate"))


def ablate(
    *args: str, url: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    if url is not None:
        full_env["ABLATE_DATABASE_URL"] = url
    return subprocess.run([ABLATE, *args], capture_output=True, text=True, env=full_env, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_version_and_help() -> None:
    assert ablate("version").stdout.startswith("ablate ")
    help_text = ablate("--help").stdout
    for command in ("db", "serve", "version"):
        assert command in help_text


def test_db_upgrade_current_downgrade(empty_db_url: str) -> None:
    assert "base (empty)" in ablate("db", "current", url=empty_db_url).stdout
    up = ablate("db", "upgrade", url=empty_db_url)
    assert up.returncode == 0, up.stderr
    assert "up to date" in ablate("db", "current", url=empty_db_url).stdout
    down = ablate("db", "downgrade", "base", url=empty_db_url)
    assert down.returncode == 0, down.stderr
    assert "base (empty)" in ablate("db", "current", url=empty_db_url).stdout


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("postgresql+psycopg://postgres@127.0.0.1:1/nowhere", "cannot reach database"),
        ("not a url at all", "malformed database URL"),
        ("mysql://root@localhost/x", "unsupported database 'mysql'"),
    ],
)
def test_bad_database_url_is_one_clear_line(url: str, needle: str) -> None:
    assert_one_line_error(ablate("db", "current", url=url), needle)


def test_unknown_revision_is_refused(db_url: str) -> None:
    assert_one_line_error(
        ablate("db", "upgrade", "nope123", url=db_url), "unknown migration revision 'nope123'"
    )


def test_database_newer_than_code_is_refused(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dfeed9999'"))
    engine.dispose()
    for args in (("db", "current"), ("db", "upgrade"), ("serve", "--port", "1")):
        assert_one_line_error(ablate(*args, url=db_url), "f00dfeed9999", "upgrade ablate")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_migrates_embedded_sqlite_and_answers_probes(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "ABLATE_DATA_DIR": str(tmp_path),
        "ABLATE_PORT": str(port),
    }
    env.pop("ABLATE_DATABASE_URL", None)
    proc = subprocess.Popen(
        [ABLATE, "serve", "--no-dispatcher"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.3)
        assert ready.status_code == 200, ready.text
        assert ready.json()["database"] == {"state": "ok", "dialect": "sqlite"}
        assert ready.json()["dispatcher"] is None  # --no-dispatcher
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json()["status"] == "ok"
        assert (tmp_path / "ablate.sqlite").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_with_two_workers_starts_both_and_answers(db_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``--workers 2``: uvicorn's worker processes on the app factory, every one started (each says so
    in the log), answering; no in-process dispatcher (it would run once per worker), and the command
    says to run ``ablate dispatcher`` beside it."""
    url = db_factory.new("postgresql")
    port = _free_port()
    env = {**os.environ, "ABLATE_DATABASE_URL": url, "ABLATE_PORT": str(port), "ABLATE_LOG_LEVEL": "info"}
    env["ABLATE_DATA_DIR"] = str(tmp_path)
    out = tmp_path / "serve.log"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [ABLATE, "serve", "--workers", "2", "--host", "127.0.0.1"], env=env, stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 120
        # both workers started (each logs it once), not only the first to answer
        while out.read_text().count("Application startup complete") < 2:
            assert proc.poll() is None, out.read_text()
            assert time.monotonic() < deadline, f"two workers did not start: {out.read_text()}"
            time.sleep(0.3)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            ready = [client.get("/readyz") for _ in range(8)]
            assert {r.status_code for r in ready} == {200}, ready[0].text
            assert ready[0].json()["database"]["state"] == "ok"
            assert ready[0].json()["dispatcher"] is None
            assert client.get("/").status_code == 200
        assert "run `ablate dispatcher` beside the server" in out.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert_one_line_error(
        ablate("serve", "--workers", "2", "--dispatcher", "--port", "1", url=url),
        "with --workers 2 pass --no-dispatcher",
    )


def test_serve_refuses_unmigrated_server_database(db_factory) -> None:  # type: ignore[no-untyped-def]
    url = db_factory.new("postgresql", migrated=False)
    assert_one_line_error(ablate("serve", "--port", "1", url=url), "run `ablate db upgrade`")


def test_report_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "ablate.sqlite"
    proc = ablate("report", "x:1", "--url", f"sqlite:///{missing}")
    assert_one_line_error(proc, f"no database at {missing}")
    assert not missing.parent.exists()  # neither the file nor its folder was made


def test_report_refuses_an_unknown_metric_with_a_suggestion(db_url: str) -> None:
    proc = ablate("report", "x:1", "--metric", "throughput_tokens_per_sec", url=db_url)
    assert_one_line_error(
        proc, "unknown metric 'throughput_tokens_per_sec'", "did you mean 'throughput_tokens_per_s'"
    )


def test_study_logs_hide_the_runners_progress_events() -> None:
    """`ablate study logs` printed raw ``@@ablate-event {json}`` lines; it keeps the log and counts them."""
    from ablate.backend.cli.study import readable_log

    log = 'step 1\n@@ablate-event {"step": 1}\n@@ablate-event {"step": 2}\nRuntimeError: boom\n'
    hidden = "(2 progress event lines of the runner not shown)\n"
    assert readable_log(log) == "step 1\nRuntimeError: boom\n" + hidden
    assert readable_log("plain\n") == "plain\n"


def test_paths_are_not_broken_at_80_columns_off_a_terminal(tmp_path: Path) -> None:
    """In a CI log (no terminal) Rich wrapped lines at 80 columns, cutting paths in two."""
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    url = f"sqlite:///{deep / 'db.sqlite'}"
    release = Path(__file__).resolve().parents[2] / "examples" / "example-releases" / "ci-results.yaml"
    assert ablate("db", "upgrade", "--url", url).returncode == 0
    assert ablate("release", "import", str(release), "--url", url).returncode == 0
    out = ablate(
        "report", "ablate-example-ci-results:0.1", "-f", "md", "-o", str(deep / "r.md"), "--url", url
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"wrote md report of ablate-example-ci-results:0.1 to {deep / 'r.md'}"]


@pytest.mark.parametrize("command", [["serve", "--no-dispatcher"], ["dispatcher"]])
def test_start_up_refuses_a_data_directory_it_cannot_write(command: list[str], tmp_path: Path) -> None:
    """Checked before anything starts, in one line naming the directory (a path under a regular file:
    refused for root too, where a read-only mode is not)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    data = blocker / "data"
    proc = ablate(*command, env={"ABLATE_DATA_DIR": str(data), "ABLATE_DATABASE_URL": ""})
    assert_one_line_error(proc, f"the data directory {data} cannot be written (Not a directory)")
    assert "ABLATE_DATA_DIR" in proc.stderr


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into a read-only directory: the case above covers it"
)
def test_start_up_refuses_a_read_only_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "logs").mkdir(parents=True)
    data.chmod(0o500)
    try:
        proc = ablate(
            "serve", "--no-dispatcher", env={"ABLATE_DATA_DIR": str(data), "ABLATE_DATABASE_URL": ""}
        )
    finally:
        data.chmod(0o700)
    assert_one_line_error(proc, f"the data directory {data} cannot be written (Permission denied)")
