"""`ablate report IMAGE:TAG --format html|md|csv|json [-o PATH]`: the release report as a file."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import typer

from ablate.backend.cli.common import console, open_database, settings
from ablate.backend.cli.serve import prepare_database
from ablate.backend.errors import AblateError
from ablate.backend.reports import FORMATS, render
from ablate.backend.services.advice import release_advice
from ablate.backend.services.comparison import ComparisonOptions, build_release_comparison
from ablate.backend.services.history import release_histories
from ablate.backend.services.runs import check_metric_names


def report(
    ref: str = typer.Argument(..., metavar="IMAGE:TAG", help="The release, e.g. training-nv-pytorch:25.12."),
    fmt: str = typer.Option("html", "--format", "-f", help=f"One of: {', '.join(FORMATS)}."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here (default: standard output)."),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Baseline IMAGE:TAG (default: previous tag)."
    ),
    timestamp: bool = typer.Option(
        False, "--timestamp", help="Stamp the body with the time (off: reproducible)."
    ),
    threshold_pct: float | None = typer.Option(None, "--threshold", help="Verdict threshold in percent."),
    lookback: int | None = typer.Option(None, "--lookback", help="Releases the lookback uses (K)."),
    metric: list[str] | None = typer.Option(None, "--metric", help="Metric to analyse (repeatable)."),
    url: str | None = typer.Option(None, "--url", help="Database URL (default: ABLATE_DATABASE_URL)."),
) -> None:
    """Export the comparison report of a release: self-contained HTML, Markdown, CSV or JSON."""
    if fmt not in FORMATS:
        raise AblateError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    cfg = settings()
    database = open_database(url, create=False)  # reading never creates a database
    prepare_database(database, embedded=url is None and cfg.is_embedded_sqlite)
    options = ComparisonOptions.from_settings(
        cfg, threshold_pct=threshold_pct, lookback=lookback, metrics=tuple(metric) if metric else None
    )
    try:
        with database.read() as session:
            check_metric_names(session, options.metrics or (), "--metric")
            comparison = build_release_comparison(session, ref, baseline_ref=baseline, options=options)
            advice = release_advice(session, ref)
            history = release_histories(session, comparison, options) if fmt == "html" else None
    finally:
        database.dispose()
    stamp = datetime.now(UTC) if timestamp else None
    body = render(comparison, fmt, generated_at=stamp, advice=advice, history=history)
    if output is None:
        sys.stdout.write(body)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(body, encoding="utf-8")
    except OSError as exc:
        raise AblateError(f"cannot write {output}: {exc.strerror}") from None
    console.print(f"wrote {fmt} report of {comparison.release.ref} to {output}", highlight=False)
