"""Fixing bad data over HTTP: `ablate run exclude|include`, `ablate study delete`, `ablate release delete`.

Each action needs an admin token and is recorded in the server's audit trail (``GET /api/v1/audit``)
under the token's name. Deletions ask first; ``--yes`` skips the question, and without a terminal to
ask on they refuse rather than guess.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import typer

from ablate.backend.cli.common import ADMIN_TOKEN, SERVER, App, console
from ablate.backend.cli.http import client, request_json
from ablate.backend.errors import AblateError

run_app = App(
    help="Runs on a server: exclude one from every analysis, or include it again.", no_args_is_help=True
)

YES = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True, markup=False)


@run_app.command()
def exclude(
    run_id: int = typer.Argument(..., min=1),
    reason: str = typer.Option(..., "--reason", help="Why (shown with the run and in the audit trail)."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Leave a finished run out of every analysis; it stays listed, struck through, with REASON."""
    with client(server, token) as http:
        done = request_json(http, "POST", f"/runs/{run_id}/exclude", json={"reason": reason})
    _say(f"run {done['run_id']} excluded: {done['exclusion_reason']} (audit #{done['audit']['id']})")


@run_app.command()
def include(
    run_id: int = typer.Argument(..., min=1),
    reason: str | None = typer.Option(None, "--reason", help="Why it is back (optional)."),
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Put an excluded run back into the analyses."""
    body = {"reason": reason} if reason is not None else {}
    with client(server, token) as http:
        done = request_json(http, "POST", f"/runs/{run_id}/include", json=body)
    _say(f"run {done['run_id']} included again (audit #{done['audit']['id']})")


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise AblateError(f"{question}: no terminal to confirm on; pass --yes to delete")
    if not typer.confirm(question, default=False):
        raise AblateError("not deleted")


def _print_deleted(what: str, done: dict[str, Any]) -> None:
    counts = ", ".join(f"{n} {kind}" for kind, n in done["deleted"].items())
    _say(f"deleted {what}: {counts} (audit #{done['audit']['id']})")


def delete_study(
    study_id: int = typer.Argument(..., min=1),
    yes: bool = YES,
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Delete a study with its runs, metrics and series (refused while runs are queued or running)."""
    with client(server, token) as http:
        study = request_json(http, "GET", f"/studies/{study_id}")  # a 404 before the question
        _confirm(
            f"delete study {study_id} ({study['name']}, release {study['release']}) and its "
            f"{len(study['runs'])} runs",
            yes,
        )
        done = request_json(http, "DELETE", f"/studies/{study_id}")
    _print_deleted(f"study {study_id}", done)


def delete_release(
    ref: str = typer.Argument(..., metavar="IMAGE:TAG"),
    yes: bool = YES,
    server: str | None = SERVER,
    token: str | None = ADMIN_TOKEN,
) -> None:
    """Delete a release with its studies, runs, metrics and series (refused while runs are queued or
    running). The audit record of the deletion stays."""
    path = f"/releases/{quote(ref, safe=':/')}"
    with client(server, token) as http:
        request_json(http, "GET", path)  # a 404 before the question
        _confirm(f"delete release {ref} with all its studies and runs", yes)
        done = request_json(http, "DELETE", path)
    _print_deleted(f"release {ref}", done)
