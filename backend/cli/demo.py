"""`ablate demo`: serve, run a real ablation study on the CPUs, write its report, keep serving."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ablate.backend.cli.common import console, open_database, settings
from ablate.backend.cli.serve import prepare_database
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


def _watch(database: Database, study_id: int, stop: threading.Event) -> dict[str, Any]:
    """Progress bars for every run and for the whole study, from the database, until it ends."""
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
            with database.read() as session:
                study = session.get(Study, study_id)
                assert study is not None
                matrix = studies.study_matrix(session, study)
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
            if done == len(runs) or stop.is_set():
                return matrix
            time.sleep(0.5)


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
    console.print(f"[bold]Ablate demo[/] · {demo_service.python_summary()}")
    database = open_database()
    prepare_database(database, embedded=cfg.is_embedded_sqlite)
    if repeats is not None and repeats < RECOMMENDED_REPEATS:
        console.print(f"[yellow]warning:[/] {few_repeats_warning(repeats)}")
    with database.transaction() as session:
        study = demo_service.create_demo_study(session, repeats=repeats)
        study_id, release_ref, n_runs = study.id, study.release.ref, len(study.runs)
    load_before = demo_service.host_load()
    console.print(f"release [bold]{release_ref}[/], study {study_id}: {n_runs} runs on the local CPUs")

    from ablate.backend.api.app import create_app

    sock, moved = _listen(host or cfg.host, port or cfg.port)
    if moved:
        console.print(f"port {port or cfg.port} is taken; using a free one")
    server: BackgroundServer = start_background_server(create_app(cfg, database, run_dispatcher=True), sock)
    console.print(f"dashboard: {server.url}/studies/{study_id}", soft_wrap=True, highlight=False)
    stop = threading.Event()
    try:
        matrix = _watch(database, study_id, stop)
    except KeyboardInterrupt:
        with database.transaction() as session:
            studies.cancel_study(session, study_id)
        console.print("interrupted: the study's remaining runs are cancelled")
        server.stop()
        raise typer.Exit(130) from None

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
    notes = demo_service.trust_notes(comparison, load)
    if notes:
        console.print("[yellow bold]these numbers are not trustworthy:[/]")
        for note in notes:
            console.print(f"  [yellow]- {note}[/]", soft_wrap=True, highlight=False)
    path = output or cfg.data_dir / "reports" / default_filename(comparison, "html")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(comparison, "html"), encoding="utf-8")
    console.print(f"report:    {path}", soft_wrap=True, highlight=False)
    console.print(f"dashboard: {server.url}/releases/{release_ref}", soft_wrap=True, highlight=False)
    if serve:
        console.print("serving until Ctrl-C")
        try:
            while server.alive:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    server.stop()
    database.dispose()
    if len(failed) == n_runs:
        raise typer.Exit(1)
