"""`ablate advise checkpointing --release IMAGE:TAG --cluster NAME --workload NAME`: how many layers
to checkpoint, as a table. Reads the database directly, like `ablate report`."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from ablate.backend.analysis.checkpointing import DEFAULT_UTILISATION
from ablate.backend.cli.common import App, console, open_database, settings
from ablate.backend.cli.serve import prepare_database
from ablate.backend.services.advice import CheckpointingAdvice, checkpointing_advice

app = App(help="Advice from stored runs: how many layers to checkpoint.", no_args_is_help=True)


@app.command("checkpointing")
def checkpointing(
    release: str = typer.Option(..., "--release", help="The release IMAGE:TAG."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster name."),
    workload: str = typer.Option(..., "--workload", help="Workload name."),
    memory_gib: float | None = typer.Option(
        None, "--memory-gib", help="Memory of one device in GiB (default: cluster label or device model)."
    ),
    utilisation: float = typer.Option(
        DEFAULT_UTILISATION, "--utilisation", help="Fraction of device memory the peak may use, in (0, 1]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON instead of a table."),
    url: str | None = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL)."),
) -> None:
    """Recommend the number of activation-checkpointed layers whose predicted peak memory fits."""
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
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return
    print_advice(result)


def print_advice(result: CheckpointingAdvice) -> None:
    a = result.advice
    table = Table(
        title=f"Checkpointing {result.workload} on {result.cluster} ({result.release})",
        caption=(
            f"budget {a.memory_budget_gib:.2f} GiB = {a.device_memory_gib:.2f} GiB x {a.utilisation:g}; "
            f"{a.level:.0%} prediction intervals; basis: {a.basis}"
        ),
    )
    for name in ("k", "peak GiB", "low", "high", "fits", "throughput vs k=0", "measured GiB"):
        table.add_column(name, justify="left" if name == "fits" else "right")
    for row in a.table:
        mark = "<-" if row.ckpt_layers == a.recommended_ckpt_layers else ""
        measured = ", ".join(f"{v:.2f}" for v in row.measured_peak_gib)
        table.add_row(
            f"{row.ckpt_layers}{' ' + mark if mark else ''}",
            f"{row.peak_memory_gib:.2f}",
            f"{row.low_gib:.2f}",
            f"{row.high_gib:.2f}",
            "yes" if row.fits else "no",
            f"{row.throughput_ratio:.3f} [{row.throughput_ratio_low:.3f}, {row.throughput_ratio_high:.3f}]",
            measured,
        )
    console.print(table)
    console.print(a.message, highlight=False)
    if a.memory_run_ids:
        console.print(f"runs used: {', '.join(map(str, a.memory_run_ids))}", highlight=False)
    if a.similar_run_ids:
        console.print(
            f"runs of similar workloads ({', '.join(a.similar_workloads)}): "
            f"{', '.join(map(str, a.similar_run_ids))}",
            highlight=False,
        )
    for note in (*a.notes, *result.notes):
        console.print(f"note: {note}", highlight=False)
