"""`ablate demo`: serve, run a real ablation study on the CPUs, write its report, keep serving."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import psutil
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ablate.backend.cli.common import console, open_database, settings
from ablate.backend.cli.serve import prepare_database
from ablate.backend.config import Settings
from ablate.backend.db.database import Database
from ablate.backend.db.models import Study
from ablate.backend.domain.states import TERMINAL_STATES
from ablate.backend.errors import AblateError
from ablate.backend.reports import default_filename, render
from ablate.backend.schemas.studies import RECOMMENDED_REPEATS, few_repeats_warning
from ablate.backend.server import BackgroundServer, bind_socket, start_background_server
from ablate.backend.services import demo as demo_service
from ablate.backend.services import studies
from ablate.backend.services.comparison import ComparisonOptions, build_release_comparison
from ablate.workers.dispatch.reaper import kill_with_groups

# Set in the demo's environment, so every process it starts (Ray's, the runs') carries it: how the
# demo finds what to end when it ends.
MARKER_ENV = "ABLATE_DEMO_PROCESS"
STOP_TIMEOUT_S = 2.0  # the server and its dispatcher get this long; what is left then is killed

STATUS_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
}


def _listen(host: str, port: int) -> tuple[socket.socket, bool]:
    """The configured port, or a free one when it is taken (the demo must not fail on a busy port)."""
    try:
        return bind_socket(host, port), False
    except AblateError:
        return bind_socket(host, 0), True


class ProgressLog:
    """The demo's progress as plain timestamped lines in a log file, and on stdout as lines when stdout
    is not a terminal (a pipe or a file: where progress bars do not animate)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self.to_stdout = not console.is_terminal

    def note(self, line: str) -> None:
        """A line for the file only (stdout shows it in its own way)."""
        if not self._file.closed:
            self._file.write(f"{datetime.now().astimezone():%Y-%m-%d %H:%M:%S} {line}\n")
            self._file.flush()

    def line(self, line: str) -> None:
        """A progress line: in the file, and on stdout when the bars do not show there."""
        self.note(line)
        if self.to_stdout:
            console.print(line, soft_wrap=True, highlight=False, markup=False)

    def close(self) -> None:
        self._file.close()


def _watch(database: Database, study_id: int, log: ProgressLog) -> dict[str, Any]:
    """Follow the study from the database until it ends: progress lines to the log, and on a terminal
    progress bars for every run and for the whole study."""
    lines = demo_service.ProgressLines()
    if not console.is_terminal:
        while True:
            matrix = _matrix(database, study_id)
            for line in lines.update(matrix):
                log.line(line)
            if all(r["status"] in TERMINAL_STATES for r in matrix["runs"]):
                return matrix
            time.sleep(0.5)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=30),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, refresh_per_second=4) as bars:
        overall: TaskID | None = None
        per_run: dict[int, TaskID] = {}
        while True:
            matrix = _matrix(database, study_id)
            for line in lines.update(matrix):
                log.note(line)
            runs = matrix["runs"]
            if overall is None:
                overall = bars.add_task("[bold]study", total=len(runs), note="")
                for r in runs:
                    label = f"  {r['variant']:<22} r{r['repeat']}"
                    per_run[r["id"]] = bars.add_task(label, total=None, note="queued", start=False)
            done = 0
            for r in runs:
                task = per_run[r["id"]]
                status = str(r["status"])
                note = f"[{STATUS_STYLE.get(status, '')}]{status}[/]"
                if status == "running" and r["latest_throughput"]:
                    note += f" {r['latest_throughput']:,.0f} tokens/s"
                if status == "running":
                    bars.start_task(task)
                total, current = r["total_steps"], r["current_step"]
                if status == "succeeded" and total:
                    current = total
                bars.update(task, total=total, completed=current or 0, note=note)
                if status in TERMINAL_STATES:
                    done += 1
                    bars.stop_task(task)
            bars.update(overall, completed=done, note=str(matrix["status"]))
            if done == len(runs):
                return matrix
            time.sleep(0.5)


def _matrix(database: Database, study_id: int) -> dict[str, Any]:
    with database.read() as session:
        study = session.get(Study, study_id)
        assert study is not None
        return studies.study_matrix(session, study)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _demo_processes(me: psutil.Process, marker: str) -> list[psutil.Process]:
    """Every process this one started, directly or not, and every one carrying its environment marker
    (a Ray worker the raylet was forking as the raylet died is no longer in the tree)."""
    found = {p.pid: p for p in me.children(recursive=True)}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != me.pid and p.pid not in found and p.environ().get(MARKER_ENV) == marker:
                found[p.pid] = p
    return list(found.values())


def _kill_process_tree(marker: str, timeout_s: float = 3.0) -> None:
    """SIGKILL every process of the demo: Ray's (GCS, raylet, its workers) and the runs' (each runner
    leads a session of its own, so its whole process group goes too)."""
    me, deadline = psutil.Process(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        procs = [p for p in _demo_processes(me, marker) if _alive(p)]
        if not procs:
            return
        kill_with_groups(procs)
        psutil.wait_procs(procs, timeout=0.5)  # reaps our direct children


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end(
    code: int, log: ProgressLog, database: Database, server: BackgroundServer | None, started: float
) -> NoReturn:
    """Stop the server and its dispatcher, kill every process of the demo, and exit with ``code``.

    Why not ``ray.shutdown()`` (which Ray also runs at exit): its graceful path flushes task events
    to a GCS we are about to kill and gives each of its processes a second to go: 15-20 s on a
    2-core box, with Ray's processes left running meanwhile. Nothing of Ray outlives the demo, so
    the demo ends them itself and exits without Ray's exit hook.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the teardown short
        signal.signal(signum, signal.SIG_IGN)
    if server is not None:
        server.stop(timeout_s=STOP_TIMEOUT_S)  # the dispatcher stops its runs with the server
    _kill_process_tree(os.environ[MARKER_ENV])
    database.dispose()
    log.note(f"stopped {time.monotonic() - started:.1f} s after the end was asked for (exit code {code})")
    log.close()
    console.file.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def demo(
    serve: bool = typer.Option(
        True, "--serve/--no-serve", help="Keep serving the dashboard after the report."
    ),
    repeats: int | None = typer.Option(
        None, min=1, max=10, help="Repeats per variant (default: the plan's 5; fewer gets a warning)."
    ),
    host: str | None = typer.Option(None, help="Bind address (default: ABLATE_HOST)."),
    port: int | None = typer.Option(None, help="Port (default: ABLATE_PORT; a free one if it is taken)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Where to write the HTML report."),
) -> None:
    """Run a real ablation study of a tiny llama-style model on this machine, then report it."""
    cfg = settings()
    os.environ[MARKER_ENV] = f"{os.getpid()}-{uuid.uuid4().hex}"
    # `kill PID` ends the demo as Ctrl-C does (by default it would end this process alone, leaving
    # Ray's and the runs' processes behind).
    signal.signal(signal.SIGTERM, _interrupt)
    console.print(f"[bold]Ablate demo[/] · {demo_service.python_summary()}")
    database = open_database()
    prepare_database(database, embedded=cfg.is_embedded_sqlite)
    if repeats is not None and repeats < RECOMMENDED_REPEATS:
        console.print(f"[yellow]warning:[/] {few_repeats_warning(repeats)}")
    with database.transaction() as session:
        study = demo_service.create_demo_study(session, repeats=repeats)
        study_id, release_ref, n_runs = study.id, study.release.ref, len(study.runs)
    log = ProgressLog(cfg.data_dir / "demo" / f"{release_ref.replace(':', '_')}.log")
    console.print(f"progress log: {log.path}", soft_wrap=True, highlight=False)

    def say(line: str) -> None:
        console.print(line, soft_wrap=True, highlight=False)
        log.note(line)

    say(f"release {release_ref}, study {study_id}: {n_runs} runs on the local CPUs")
    server: BackgroundServer | None = None
    failed: int | None = None  # runs that did not succeed, once the study ended
    try:
        load_before = demo_service.host_load()
        from ablate.backend.api.app import create_app

        sock, moved = _listen(host or cfg.host, port or cfg.port)
        if moved:
            say(f"port {port or cfg.port} is taken; using a free one")
        server = start_background_server(create_app(cfg, database, run_dispatcher=True), sock)
        say(f"dashboard: {server.url}/studies/{study_id}")
        matrix = _watch(database, study_id, log)
        failed, baseline_ref = _report(cfg, database, matrix, release_ref, output, load_before, say)
        if serve:
            say(f"dashboard: {server.url}/releases/{release_ref}")
            if baseline_ref:
                say(f"compare:   {server.url}/compare?a={quote(baseline_ref)}&b={quote(release_ref)}")
            say("serving until Ctrl-C")
            while server.alive:
                time.sleep(0.5)
        else:  # this demo's server stops now: no URL that would be dead when read
            say(f"to browse it: `ablate serve`, then open /releases/{release_ref} (the dashboard stops now)")
    except KeyboardInterrupt:
        started = time.monotonic()
        if failed is None:  # still running
            with database.transaction() as session:
                studies.cancel_study(session, study_id)
            say("interrupted: the study's remaining runs are cancelled")
        else:
            say("stopping")
        _end(130, log, database, server, started)
    except Exception:
        # e.g. Ray or the server failed to start: the error is reported, nothing the demo started stays
        log.note("failed; stopping every process of the demo")
        _kill_process_tree(os.environ[MARKER_ENV])
        log.close()
        raise
    _end(1 if failed == n_runs else 0, log, database, server, time.monotonic())


def _report(
    cfg: Settings,
    database: Database,
    matrix: dict[str, Any],
    release_ref: str,
    output: Path | None,
    load_before: tuple[float, int] | None,
    say: Callable[[str], None],
) -> tuple[int, str | None]:
    """Say which runs failed and why, what the study found, whether the numbers can be trusted, and
    write the HTML report; returns how many runs did not succeed and the release compared against."""
    failed = [r for r in matrix["runs"] if r["status"] != "succeeded"]
    for r in failed:
        console.print(f"[red]run {r['id']} ({r['variant']} r{r['repeat']}) {r['status']}:[/] {r['error']}")

    with database.read() as session:
        comparison = build_release_comparison(
            session, release_ref, options=ComparisonOptions.from_settings(cfg)
        )
    load_after = demo_service.host_load()
    # The busier end of the measurement is the one that can have spoiled it.
    loads = [x for x in (load_before, load_after) if x is not None]
    load = max(loads) if loads else None
    for line in demo_service.headlines(comparison):
        say(line)
    notes = demo_service.trust_notes(comparison, load)
    if notes:
        console.print("[yellow bold]these numbers are not trustworthy:[/]")
        for note in notes:
            console.print(f"  [yellow]- {note}[/]", soft_wrap=True, highlight=False)
    path = output or cfg.data_dir / "reports" / default_filename(comparison, "html")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(comparison, "html"), encoding="utf-8")
    say(f"report:    {path}")
    return len(failed), comparison.baseline.ref if comparison.baseline else None
