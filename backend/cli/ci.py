"""`ablate ci`: one command per CI job. `ci run` wraps a benchmark and stores its result; `ci check`
gates the job on the release's verdicts. docs/ci.md describes the loop and the exit codes."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import typer
import yaml
from rich.markup import escape

from ablate.backend.cli.ci_gate import FAIL_ON, gate, render_markdown, wait_for_runs
from ablate.backend.cli.ci_run import (
    Capture,
    Cell,
    build_result,
    exit_code_of,
    load_definitions,
    read_log,
    run_command,
    write_result,
)
from ablate.backend.cli.common import SERVER, TOKEN, App, console, err_console, fail, read_yaml
from ablate.backend.cli.http import auth_headers, client, describe_problem, request_json, server_url
from ablate.backend.cli.results import post_with_retries
from ablate.backend.config import CiEnvironment
from ablate.backend.errors import AblateError
from ablate.workers.parsers import LogParser, get_parser, known_parsers

app = App(help="CI jobs: run a benchmark and store its result; gate the job on the release's verdicts.")

# `ci run`: the result is not stored (the server could not be reached, or was still failing when the
# retries ran out); the result file says what to send later. Also click's code for usage errors.
EXIT_NOT_STORED = 2
# `ci run`: the command could not be started (as a shell says).
EXIT_NOT_STARTED = 127
# `ci check`: the gate could not decide (server unreachable, unknown release, bad options).
EXIT_UNDECIDED = 2


def _parser_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; each value is read as YAML (``4096`` a number, ``[...]``/``{...}`` a list or
    mapping, as the regex parser's ``patterns`` need), else kept as text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--parser-option")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def _parser(cell: Cell, name: str | None, options: dict[str, Any]) -> tuple[str, LogParser]:
    """The parser the command runner would use for this workload (its ``parser`` and
    ``runner_options.parser_options``, with its seq_len and global batch), ``--parser`` and
    ``--parser-option`` overriding them."""
    w = cell.definition("workload")
    chosen = name or w.get("parser")
    if not chosen:
        raise typer.BadParameter("the workload names no parser: give one", param_hint="--parser")
    merged = {
        "seq_len": w.get("seq_len"),
        "global_batch": w.get("global_batch"),
        **((w.get("runner_options") or {}).get("parser_options") or {}),
        **options,
    }
    try:
        return str(chosen), get_parser(str(chosen), merged)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--parser/--parser-option") from None


def _entry_path(kind: str, name: str) -> str:
    return f"/{kind}s/{quote(name, safe='/+:@')}"


def _check_server(cell: Cell, server: str | None, token: str | None) -> None:
    """Before the benchmark runs: the release and every entry named without a definition must exist
    (an hour of benchmark must not end in "cluster does not exist"); their definitions give the
    parser its context. An unreachable server is not fatal here: the result is kept in its file."""
    with client(server, token, timeout=15.0) as http:
        try:
            for kind, path in [("release", f"/releases/{quote(cell.release, safe='/:@')}")] + [
                (kind, _entry_path(kind, value))
                for kind, value in cell.entries.items()
                if isinstance(value, str)
            ]:
                response = http.get(path)
                if response.status_code == 404:
                    hint = (
                        "import it first: ablate release import FILE.yaml"
                        if kind == "release"
                        else "define it with --define FILE (cluster, workloads and variants as in a plan)"
                    )
                    name = cell.release if kind == "release" else cell.entries[kind]
                    raise AblateError(f"{kind} {name!r} does not exist on {http.base_url}; {hint}")
                if response.status_code >= 400:
                    raise AblateError(describe_problem(response))
                if kind != "release":
                    cell.known[kind] = response.json()
        except httpx.TransportError as exc:
            err_console.print(
                f"[yellow]warning:[/] cannot reach {http.base_url} now ({exc}); running anyway, "
                "the result is kept in its file",
                highlight=False,
                soft_wrap=True,
            )


@app.command(
    "run",
    context_settings={"allow_interspersed_args": False},
    epilog="Exit: 0 stored and succeeded; the command's own code when it failed; 1 refused by the "
    "server or no metrics in the output; 2 not stored (unreachable; send the file later with "
    "`ablate results submit FILE`).",
)
def run(
    command: list[str] = typer.Argument(None, help="The benchmark, after --."),
    release: str = typer.Option(..., "--release", help="The release IMAGE:TAG (it must exist)."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster name."),
    workload: str = typer.Option(..., "--workload", help="Workload name."),
    variant: str = typer.Option(..., "--variant", help="Variant (rung) name."),
    parser_name: str | None = typer.Option(
        None,
        "--parser",
        help=f"Log parser: {', '.join(known_parsers())} (docs/runners.md); default: the workload's.",
    ),
    parser_option: list[str] = typer.Option(
        [], "--parser-option", help="KEY=VALUE for the parser (repeatable), e.g. seq_len=4096."
    ),
    repeat: int | None = typer.Option(
        None, "--repeat", min=0, help="Repeat number; default: the next free one of the cell."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Where the result file goes (default: ./ablate-result-<id>.json)."
    ),
    define: Path | None = typer.Option(
        None, "--define", help="Cluster/workload/variant definitions in the plan's syntax, for new entries."
    ),
    log: Path | None = typer.Option(
        None, "--log", help="Parse this existing log instead of running a command."
    ),
    retry_for: float = typer.Option(
        120.0, "--retry-for", min=0.0, max=120.0, help="Seconds to keep retrying an unreachable server."
    ),
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """Run a benchmark (or parse its log), store its result, and exit with the benchmark's outcome.

    The command's output is streamed to this job's log and parsed with the workers' parsers; the
    result (metrics, series, start and finish, the CI job in its provenance) is written to a file
    first and then submitted, retried for up to --retry-for seconds, stored exactly once."""
    if bool(command) == (log is not None):
        raise typer.BadParameter("give a command after -- or --log FILE (one of them)")
    cli_options = _parser_options(parser_option)
    server_url(server)  # a malformed URL is refused before anything runs
    definitions = load_definitions(define, read_yaml(define)) if define else {}
    names = {"cluster": cluster, "workload": workload, "variant": variant}
    cell = Cell(release, {kind: definitions.get(kind, {}).get(name, name) for kind, name in names.items()})
    key = f"ci:{uuid.uuid4().hex}"
    path = out or Path.cwd() / f"ablate-result-{key[3:15]}.json"
    _check_server(cell, server, token)
    parser_name, parser = _parser(cell, parser_name, cli_options)
    if command:
        try:
            outcome = run_command(command, parser, stdout=sys.stdout, stderr=sys.stderr)
        except AblateError as exc:  # not started: nothing ran, nothing to record
            fail(str(exc), EXIT_NOT_STARTED)
        tail = outcome.output_tail
    else:
        assert log is not None
        outcome, tail = None, read_log(log, parser)
    built = build_result(
        cell,
        repeat=repeat,
        parser_name=parser_name,
        parser=parser,
        key=key,
        capture=Capture(command or None, outcome, tail, log),
    )
    write_result(path, built.result)
    benchmark_code = exit_code_of(outcome.returncode) if outcome and outcome.returncode else 0
    if built.reason:
        err_console.print(f"[bold red]run failed:[/] {escape(built.reason)}", highlight=False, soft_wrap=True)
    stored = _submit(path, built.result, server, token, retry_for)
    if benchmark_code:
        raise typer.Exit(benchmark_code)
    if stored is None:
        raise typer.Exit(EXIT_NOT_STORED)
    if not stored or not built.succeeded:
        raise typer.Exit(1)


def _submit(
    path: Path, result: dict[str, Any], server: str | None, token: str | None, retry_for: float
) -> bool | None:
    """POST the file's batch; True stored (now or before), False refused, None not reached."""
    body = path.read_bytes()
    headers = {"Content-Type": "application/json", **auth_headers(token)}
    url = f"{server_url(server)}/api/v1/results"
    later = f"the result is in {path}; store it later with: ablate results submit {path}"
    try:
        with httpx.Client(timeout=60.0) as http:
            response = post_with_retries(
                http, url, body, headers, retries=1_000, backoff_s=1.0, give_up_after_s=retry_for
            )
    except AblateError as exc:
        err_console.print(
            f"[bold red]not stored:[/] {escape(str(exc))}; {escape(later)}", highlight=False, soft_wrap=True
        )
        return None
    if response.status_code in (200, 201):
        out = response.json()
        run_id = out["run_ids"][0]
        state = "stored" if out.get("created") else "already stored"
        what = f"{result['status']} run" + (f", repeat {result['repeat']}" if "repeat" in result else "")
        console.print(
            f"{state} as run {run_id} ({what}); result file {path}", highlight=False, soft_wrap=True
        )
        return True
    if response.status_code >= 500 or response.status_code == 429:
        err_console.print(
            f"[bold red]not stored:[/] {escape(describe_problem(response))}; {escape(later)}",
            highlight=False,
            soft_wrap=True,
        )
        return None
    err_console.print(
        f"[bold red]refused:[/] {escape(describe_problem(response))} (result kept in {escape(str(path))})",
        highlight=False,
        soft_wrap=True,
    )
    return False


@app.command(
    "check",
    epilog="Exit: 0 no verdict reaches --fail-on; 1 one does; 2 the gate could not decide (server "
    "unreachable, unknown release, bad options).",
)
def check(
    release: str = typer.Argument(..., metavar="IMAGE:TAG", help="The release to gate."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Baseline IMAGE:TAG (default: previous tag)."
    ),
    fail_on: str = typer.Option(
        "regressed", "--fail-on", help="regressed, or suspect (also unconfirmed drops)."
    ),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write the Markdown summary here."),
    as_json: bool = typer.Option(False, "--json", help="Print the gate as JSON instead of Markdown."),
    wait: bool = typer.Option(
        False, "--wait", help="First wait until no run of the release is queued or running."
    ),
    wait_timeout: float = typer.Option(
        3600.0, "--wait-timeout", min=0.0, help="Seconds --wait waits at most."
    ),
    poll: float = typer.Option(10.0, "--poll", min=0.1, help="Seconds between reads with --wait."),
    metric: list[str] | None = typer.Option(None, "--metric", help="Metric to judge (repeatable)."),
    server: str | None = SERVER,
    token: str | None = TOKEN,
) -> None:
    """Judge a release against its baseline with the server's comparison: the regressed (and, with
    --fail-on suspect, the unconfirmed) cells, as Markdown on stdout, in --markdown FILE and in the
    GitHub job summary ($GITHUB_STEP_SUMMARY); the exit code is the gate."""
    if fail_on not in FAIL_ON:
        fail(f"--fail-on must be one of {', '.join(FAIL_ON)}, got {fail_on!r}", EXIT_UNDECIDED)
    params: dict[str, Any] = {"baseline": baseline} if baseline else {}
    if metric:
        params["metric"] = metric
    try:
        base = server_url(server)
        with client(server, token) as http:
            path = f"/releases/{quote(release, safe='/:@')}/comparison"
            if wait:
                comparison = wait_for_runs(http, path, params, timeout_s=wait_timeout, poll_s=poll)
            else:
                comparison = request_json(http, "GET", path, params=params)
    except AblateError as exc:
        fail(str(exc), EXIT_UNDECIDED)
    result = gate(comparison, fail_on)
    text = render_markdown(result, dashboard=base)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(text)
    summary = CiEnvironment().github_step_summary
    for target, mode in ((markdown, "w"), (Path(summary) if summary else None, "a")):
        if target is None:
            continue
        try:
            with target.open(mode, encoding="utf-8") as f:
                f.write(text + ("\n" if mode == "a" else ""))
        except OSError as exc:
            fail(f"cannot write {target}: {exc.strerror}", EXIT_UNDECIDED)
    raise typer.Exit(1 if result.failed else 0)
