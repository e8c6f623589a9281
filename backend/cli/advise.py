"""`ablate advise checkpointing --release IMAGE:TAG --cluster NAME --workload NAME`: how many layers
to checkpoint, as a table. Reads the database (``--url``), or asks a server (``--server``, the same
answer as ``GET /api/v1/advice/checkpointing``), like `ablate report`."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.table import Table

from ablate.backend.analysis.checkpointing import DEFAULT_UTILISATION
from ablate.backend.cli.common import App, console, open_database, settings
from ablate.backend.cli.http import client, request_json
from ablate.backend.cli.serve import prepare_database
from ablate.backend.errors import AblateError
from ablate.backend.services.advice import checkpointing_advice

EXIT_DOES_NOT_FIT = 3

app = App(help="Advice from stored runs: how many layers to checkpoint.", no_args_is_help=True)


@app.command("checkpointing")
def checkpointing(
    release: str = typer.Option(..., "--release", help="The release IMAGE:TAG."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster name."),
    workload: str = typer.Option(..., "--workload", help="Workload name."),
    memory_gib: float | None = typer.Option(
        None,
        "--memory-gib",
        help="Memory of one device in GiB (default: the cluster's device_memory_gib, else its device model).",
    ),
    utilisation: float = typer.Option(
        DEFAULT_UTILISATION, "--utilisation", help="Fraction of device memory the peak may use, in (0, 1]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON instead of a table."),
    url: str | None = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL)."),
    server: str | None = typer.Option(
        None, "--server", help="Ask this Ablate server instead of reading a database (e.g. from CI)."
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        help="API token for --server (default: ABLATE_TOKEN; read scope when reads need one).",
    ),
) -> None:
    """Recommend the number of activation-checkpointed layers whose predicted peak memory fits. Exits 0
    with a recommendation, 3 when not even every layer checkpointed fits (a CI step can gate on it), 1 on
    an error."""
    if server is not None:
        if url is not None:
            raise AblateError("give --url (a database) or --server (a server), not both")
        params: dict[str, Any] = {
            "release": release,
            "cluster": cluster,
            "workload": workload,
            "utilisation": utilisation,
        }
        if memory_gib is not None:
            params["memory_gib"] = memory_gib
        with client(server, token) as http:
            answer = request_json(http, "GET", "/advice/checkpointing", params=params)
    else:
        cfg = settings()
        database = open_database(url)
        try:
            prepare_database(database, embedded=url is None and cfg.is_embedded_sqlite)
            with database.read() as session:
                result = checkpointing_advice(
                    session, release, cluster, workload, memory_gib=memory_gib, utilisation=utilisation
                )
        finally:
            database.dispose()
        answer = result.to_json()
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
    else:
        print_advice(answer)
    if answer["recommended_ckpt_layers"] is None:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def print_advice(a: dict[str, Any]) -> None:
    """The advice's JSON (the API's answer, local or remote) as a table and notes."""
    table = Table(
        title=f"Checkpointing {a['workload']} on {a['cluster']} ({a['release']})",
        caption=(
            f"budget {a['memory_budget_gib']:.2f} GiB = {a['device_memory_gib']:.2f} GiB x "
            f"{a['utilisation']:g}; {a['level']:.0%} prediction intervals; basis: {a['basis']}"
        ),
    )
    for name in ("k", "peak GiB", "low", "high", "fits", "throughput vs k=0", "measured GiB"):
        table.add_column(name, justify="left" if name == "fits" else "right")
    for row in a["table"]:
        mark = "<-" if row["ckpt_layers"] == a["recommended_ckpt_layers"] else ""
        measured = ", ".join(f"{v:.2f}" for v in row["measured_peak_memory_gib"])
        table.add_row(
            f"{row['ckpt_layers']}{' ' + mark if mark else ''}",
            f"{row['peak_memory_gib']:.2f}",
            f"{row['low_gib']:.2f}",
            f"{row['high_gib']:.2f}",
            "yes" if row["fits"] else "no",
            f"{row['throughput_ratio']:.3f} [{row['throughput_ratio_low']:.3f}, "
            f"{row['throughput_ratio_high']:.3f}]",
            measured,
        )
    console.print(table)
    console.print(a["message"], highlight=False)
    ids = a["run_ids"]
    if ids["memory"]:
        console.print(f"runs used: {', '.join(map(str, ids['memory']))}", highlight=False)
    if ids["similar"]:
        console.print(
            f"runs of similar workloads ({', '.join(a['similar_workloads'])}): "
            f"{', '.join(map(str, ids['similar']))}",
            highlight=False,
        )
    for note in a["notes"]:
        console.print(f"note: {note}", highlight=False)
