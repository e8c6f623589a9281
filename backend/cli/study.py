"""`ablate study`: submit a plan to a server, follow it, list, show, cancel, and read a run's log.

Everything goes over HTTP (``--server``/``--token`` as for ``results submit``), so it works the same
against a laptop's ``ablate serve`` and a shared deployment. A plan is validated here first, with
the server's own schema, so a typo is reported before anything is sent.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ablate.backend.cli.common import SERVER, App, console, err_console, read_yaml
from ablate.backend.cli.http import client, describe_problem, request_json
from ablate.backend.cli.hygiene import delete_study
from ablate.backend.domain.states import TERMINAL_STATES
from ablate.backend.errors import AblateError
from ablate.backend.schemas.common import UNION_TAGS
from ablate.backend.schemas.studies import StudyPlan
from ablate.workers.runners.torch_llm.protocol import EVENT_PREFIX

app = App(
    help="Studies on a server: submit a plan, follow it, list, show, cancel, delete, read logs.",
    no_args_is_help=True,
)

TOKEN = typer.Option(None, "--token", help="API token (default: ABLATE_TOKEN); submit and cancel need admin.")
# Exit codes of `submit --wait`: the study's outcome, so CI can gate on it; and when following ended
# without one: the server stayed unreachable (the study goes on), or Ctrl-C.
EXIT_FOR = {"succeeded": 0, "failed": 1, "cancelled": 3}
EXIT_LOST_CONTACT = 4
EXIT_INTERRUPTED = 130
RETRYABLE = {429, 500, 502, 503, 504}


class LostContact(AblateError):
    """The server could not be read for longer than the follower waits."""


def load_plan(path: Path) -> dict[str, Any]:
    """A plan file (YAML or JSON) checked against the server's schema; errors name file and field."""
    data: Any = read_yaml(path)
    if not isinstance(data, dict):
        raise AblateError(f"{path}: expected a mapping with release, cluster, variants, workloads, ...")
    try:
        StudyPlan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"] if p not in UNION_TAGS) or "plan"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise AblateError(f"{path}: {loc}: {first['msg']}{more}") from None
    return data


def first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def describe_run(run: dict[str, Any]) -> str:
    """One line for a finished run: what ran, how it ended, and why when it failed."""
    what = f"run {run['id']} {run['variant']} / {run['workload']} r{run['repeat']}"
    if run["status"] == "succeeded":
        tput = run.get("latest_throughput")
        return f"{what}: succeeded" + (f", {tput:,.0f} tokens/s" if tput else "")
    kind = f" ({run['failure_kind']})" if run.get("failure_kind") else ""
    why = first_line(run.get("error"))
    return f"{what}: {run['status']}{kind}" + (f": {why}" if why else "")


@app.command()
def submit(
    plan: Path = typer.Argument(..., help="Plan file (YAML or JSON), see docs/plans.md."),
    wait: bool = typer.Option(False, "--wait", help="Follow the study until it ends; exit with its outcome."),
    poll: float = typer.Option(2.0, "--poll", min=0.2, help="Seconds between progress reads with --wait."),
    lost_after: float = typer.Option(
        300.0, "--lost-after", min=0.0, help="With --wait: give up after the server is unreachable this long."
    ),
    cancel_on_interrupt: bool = typer.Option(
        False,
        "--cancel-on-interrupt",
        help="With --wait: Ctrl-C cancels the study (default: it keeps running).",
    ),
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """Queue a study from PLAN. With --wait: a progress bar on a terminal, a line per finished run
    otherwise; exit 0 if the study succeeded, 1 if it failed, 3 if it was cancelled, 4 if the server
    stayed unreachable for --lost-after seconds (connection errors and 5xx before that are retried),
    130 on Ctrl-C (the study keeps running unless --cancel-on-interrupt)."""
    data = load_plan(plan)
    with client(server, token) as http:
        study = request_json(http, "POST", "/studies", json=data)
        console.print(
            f"study {study['id']} ({study['name']}): {len(study['runs'])} runs queued on {study['cluster']}",
            highlight=False,
            soft_wrap=True,
        )
        for warning in study.get("warnings") or []:
            err_console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        if not wait:
            return
        study_id = int(study["id"])
        try:
            final = follow(http, study_id, poll_s=poll, live=sys.stdout.isatty(), lost_after_s=lost_after)
        except LostContact as exc:
            err_console.print(
                f"[bold red]lost contact:[/] {exc}; study {study_id} keeps running on the server: "
                f"follow it with `ablate study show {study_id}`",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_LOST_CONTACT) from None
        except KeyboardInterrupt:
            interrupted(http, study_id, cancel=cancel_on_interrupt)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(EXIT_FOR.get(final["status"], 1))


def interrupted(http: httpx.Client, study_id: int, *, cancel: bool) -> None:
    """Ctrl-C while following: say what happens to the study (or cancel it, when asked)."""
    if not cancel:
        err_console.print(
            f"interrupted: study {study_id} keeps running on the server; "
            f"cancel it with `ablate study cancel {study_id}`, follow it with `ablate study show {study_id}`",
            highlight=False,
            soft_wrap=True,
        )
        return
    try:
        study = request_json(http, "POST", f"/studies/{study_id}/cancel")
    except AblateError as exc:
        err_console.print(
            f"interrupted: cancelling study {study_id} failed ({exc}); "
            f"it may keep running: `ablate study cancel {study_id}`",
            highlight=False,
            soft_wrap=True,
        )
        return
    err_console.print(f"interrupted: study {study_id} {study['status']}", highlight=False)


def read_study(http: httpx.Client, study_id: int, *, lost_after_s: float, poll_s: float) -> dict[str, Any]:
    """The study, reading again through connection errors and 5xx (a dropped keep-alive connection,
    a restarting server) for up to ``lost_after_s``; then :class:`LostContact`. Refusals (4xx) end at once."""
    deadline = time.monotonic() + lost_after_s
    while True:
        try:
            response = http.get(f"/studies/{study_id}")
        except httpx.TransportError as exc:
            problem = f"cannot reach {http.base_url}: {exc}"
        else:
            if response.status_code < 400:
                study: dict[str, Any] = response.json()
                return study
            if response.status_code not in RETRYABLE:
                raise AblateError(describe_problem(response))
            problem = describe_problem(response)
        if time.monotonic() >= deadline:
            raise LostContact(f"{problem} (for {lost_after_s:g} s)")
        time.sleep(max(0.05, min(poll_s, deadline - time.monotonic())))


def follow(
    http: httpx.Client, study_id: int, *, poll_s: float, live: bool, lost_after_s: float = 300.0
) -> dict[str, Any]:
    """Read the study until it ends, reporting finished runs; returns the last read."""
    reported: set[int] = set()
    progress = Progress(
        TextColumn("study {task.fields[study]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not live,
    )
    with progress:
        task = progress.add_task("runs", total=None, study=study_id, status="queued")
        while True:
            study = read_study(http, study_id, lost_after_s=lost_after_s, poll_s=poll_s)
            runs = study["runs"]
            done = [r for r in runs if r["status"] in TERMINAL_STATES]
            for run in done:
                if run["id"] not in reported:
                    reported.add(run["id"])
                    progress.console.print(describe_run(run), highlight=False, soft_wrap=True, markup=False)
            progress.update(task, total=len(runs), completed=len(done), status=study["status"])
            if study["status"] in TERMINAL_STATES:
                break
            time.sleep(poll_s)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(study["counts"].items()))
    console.print(f"study {study_id} {study['status']}: {counts}", highlight=False, soft_wrap=True)
    return study


@app.command("list")
def list_(
    limit: int = typer.Option(20, "--limit", min=1, max=1000, help="Newest first, at most this many."),
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """The newest studies."""
    with client(server, token) as http:
        rows = request_json(http, "GET", "/studies", params={"limit": limit})
    table = Table("id", "name", "status", "release", "cluster", "repeats", "created")
    for s in rows:
        cells = [s["id"], s["name"], s["status"], s["release"], s["cluster"], s["repeats"], s["created_at"]]
        table.add_row(*(Text(str(c)) for c in cells))
    console.print(table)


@app.command()
def show(
    study_id: int = typer.Argument(..., min=1), server: str | None = SERVER, token: str | None = TOKEN
) -> None:
    """A study: its cells, every run with its status, and why each failed run failed."""
    with client(server, token) as http:
        study = request_json(http, "GET", f"/studies/{study_id}")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(study["counts"].items()))
    console.print(
        f"study {study['id']} ({study['name']}): {study['status']} · {study['release']} "
        f"on {study['cluster']} · {len(study['variants'])} variants x {len(study['workloads'])} workloads "
        f"x {study['repeats']} repeats · {counts}",
        highlight=False,
        soft_wrap=True,
    )
    if study.get("waiting"):  # nothing will start (or finish) its runs: say so before the table
        console.print(study["waiting"], highlight=False, soft_wrap=True, markup=False)
    table = Table("run", "variant", "workload", "r", "status", "attempt", "tokens/s")
    for run in study["runs"]:
        tput = run.get("latest_throughput")
        status = f"{run['status']} (excluded)" if run.get("excluded_at") else run["status"]
        cells = [run["id"], run["variant"], run["workload"], run["repeat"], status, run["attempt"]]
        # Text(): names are shown as written, never read as rich markup.
        table.add_row(*(Text(str(c)) for c in cells), f"{tput:,.0f}" if tput else "")
    console.print(table)
    failed = [r for r in study["runs"] if r["status"] in ("failed", "cancelled")]
    if failed:
        # Reasons below the table, one full line each: a table column would cut them.
        console.print("why runs did not succeed:", highlight=False)
        for run in failed:
            console.print(f"  {describe_run(run)}", highlight=False, soft_wrap=True, markup=False)
    if study.get("adaptive"):  # repeats {min, max}: where each comparison stopped
        console.print(study["adaptive"]["headline"], highlight=False, soft_wrap=True, markup=False)
        for comparison in study["adaptive"]["comparisons"]:
            console.print(f"  {comparison['text']}", highlight=False, soft_wrap=True, markup=False)
    excluded = [r for r in study["runs"] if r.get("excluded_at")]
    if excluded:
        console.print("excluded from every analysis:", highlight=False)
        for run in excluded:
            cell = f"{run['variant']} / {run['workload']} r{run['repeat']}"
            line = f"  run {run['id']} ({cell}): {run['exclusion_reason']}"
            console.print(line, highlight=False, soft_wrap=True, markup=False)
    # Queued runs waiting for devices say for what and who holds them (the dispatcher writes it).
    waiting = [
        r
        for r in study["runs"]
        if r["status"] == "queued" and first_line(r.get("error")).startswith("waiting")
    ]
    if waiting:
        console.print("queued runs waiting:", highlight=False)
        for run in waiting:
            line = f"  run {run['id']}: {first_line(run.get('error'))}"
            console.print(line, highlight=False, soft_wrap=True, markup=False)


@app.command()
def cancel(
    study_id: int = typer.Argument(..., min=1), server: str | None = SERVER, token: str | None = TOKEN
) -> None:
    """Cancel a study: queued runs are cancelled, running ones are stopped by their dispatcher."""
    with client(server, token) as http:
        study = request_json(http, "POST", f"/studies/{study_id}/cancel")
    console.print(f"study {study['id']} {study['status']}", highlight=False)


NODE = typer.Option(
    None, "--node", min=0, help="Print this node's whole log file(s) (one per rank where there are ranks)."
)
ATTEMPT = typer.Option(
    None,
    "--attempt",
    min=0,
    help="With --node: that attempt's files (every attempt keeps its own; 0: files kept before that); "
    "default: the latest attempt that kept files.",
)


@app.command()
def logs(
    run_id: int = typer.Argument(..., min=1),
    node: int | None = NODE,
    attempt: int | None = ATTEMPT,
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """A run's stored log tail (the last lines the runner kept) and every attempt's log files with its
    outcome; ``--node N`` prints node N's log files whole (``--attempt K``: of attempt K)."""
    if attempt is not None and node is None:
        raise AblateError("--attempt picks whose files --node prints: give --node too")
    with client(server, token) as http:
        run = request_json(http, "GET", f"/runs/{run_id}")
        found = request_json(http, "GET", f"/runs/{run_id}/logs")
        if node is not None:
            print_node_logs(http, run_id, node, pick_attempt(run_id, found["attempts"], attempt))
            return
    console.print(
        f"run {run['id']} {run['variant']} / {run['workload']} r{run['repeat']}: {run['status']}",
        highlight=False,
        soft_wrap=True,
    )
    if run.get("error"):
        console.print(f"error: {run['error']}", highlight=False, soft_wrap=True, markup=False)
    if run.get("log_path"):
        console.print(f"full log on the worker: {run['log_path']}", highlight=False, soft_wrap=True)
    tail = run.get("log_tail")
    if tail:
        console.print(readable_log(tail), highlight=False, soft_wrap=True, markup=False)
    else:
        console.print("(no log tail stored)")
    for a in found["attempts"]:
        title = "earlier logs" if a["attempt"] == 0 else f"attempt {a['attempt']}"
        line = f"{title}: {a['outcome']}" + (f" ({a['reason']})" if a["reason"] else "")
        console.print(line, highlight=False, soft_wrap=True, markup=False)
        for f in a["files"]:
            where = f"node {f['node_rank']}" + (f" rank {f['rank']}" if f["rank"] is not None else "")
            console.print(
                f"  log file {f['name']}: {where} on {f['host'] or '?'}, {f['size']} bytes", highlight=False
            )


def pick_attempt(run_id: int, attempts: list[dict[str, Any]], attempt: int | None) -> dict[str, Any]:
    """The attempt whose files to print: ``attempt``, or the latest that kept files."""
    if attempt is None:
        kept = [a for a in attempts if a["files"]]
        if not kept:
            raise AblateError(f"run {run_id} has no log files")
        return kept[-1]
    for a in attempts:
        if a["attempt"] == attempt:
            return a
    have = [a["attempt"] for a in attempts]
    raise AblateError(f"run {run_id} has no attempt {attempt} (attempts: {have or 'none'})")


def print_node_logs(http: httpx.Client, run_id: int, node: int, attempt: dict[str, Any]) -> None:
    files = attempt["files"]
    mine = [f for f in files if f["node_rank"] == node]
    which = "the earlier logs" if attempt["attempt"] == 0 else f"attempt {attempt['attempt']}"
    if not mine:
        have = sorted({f["node_rank"] for f in files})
        raise AblateError(
            f"run {run_id} has no log file of node {node} in {which} (log files of nodes: {have or 'none'})"
        )
    for f in mine:
        console.print(
            f"== {f['name']} ({which}, host {f['host'] or '?'}, {f['size']} bytes) ==", highlight=False
        )
        response = http.get(f"/runs/{run_id}/logs/{f['name']}", params={"attempt": f["attempt"]})
        if response.status_code >= 400:
            raise AblateError(describe_problem(response))
        sys.stdout.write(readable_log(response.text))
        sys.stdout.flush()


def readable_log(text: str) -> str:
    """A log without the runner's machine-read progress lines (``@@ablate-event {json}``: the study
    page's progress comes from them), counted in one line where they were."""
    kept: list[str] = []
    hidden = 0
    for line in text.splitlines(keepends=True):
        if line.startswith(EVENT_PREFIX):
            hidden += 1
            continue
        kept.append(line)
    if hidden:
        kept.append(f"({hidden} progress event line{'s' if hidden != 1 else ''} of the runner not shown)\n")
    return "".join(kept)


app.command("delete")(delete_study)
