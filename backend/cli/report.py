"""`ablate report IMAGE:TAG --format html|md|csv|json [-o PATH]`: the release report as a file, built
from a database (``--url``) or fetched from a server (``--server``: ``GET /api/v1/releases/{ref}/report``,
the same bytes)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import typer

from ablate.backend.cli.common import console, open_database, settings
from ablate.backend.cli.http import client, describe_problem
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
    server: str | None = typer.Option(
        None, "--server", help="Fetch the report from this Ablate server instead of a database (e.g. CI)."
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        help="API token for --server (default: ABLATE_TOKEN; read scope when reads need one).",
    ),
) -> None:
    """Export the comparison report of a release: self-contained HTML, Markdown, CSV or JSON."""
    if fmt not in FORMATS:
        raise AblateError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if server is not None:
        if url is not None:
            raise AblateError("give --url (a database) or --server (a server), not both")
        params: dict[str, Any] = {"format": fmt, "timestamp": timestamp}
        for key, value in (("baseline", baseline), ("threshold_pct", threshold_pct), ("lookback", lookback)):
            if value is not None:
                params[key] = value
        if metric:
            params["metric"] = metric
        _write(_fetch(server, token, ref, params), output, f"{fmt} report of {ref}")
        return
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
    _write(body.encode("utf-8"), output, f"{fmt} report of {comparison.release.ref}")


def _fetch(server: str, token: str | None, ref: str, params: dict[str, Any]) -> bytes:
    """The report's bytes from the server; a refusal or no answer is one line naming it."""
    with client(server, token) as http:
        path = f"/releases/{quote(ref, safe=':/@')}/report"
        try:
            response = http.get(path, params=params)
        except httpx.TransportError as exc:
            raise AblateError(f"cannot reach {http.base_url}: {exc}") from None
        if response.status_code >= 400:
            raise AblateError(describe_problem(response))
        return response.content


def _write(body: bytes, output: Path | None, what: str) -> None:
    if output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(body)
    except OSError as exc:
        raise AblateError(f"cannot write {output}: {exc.strerror}") from None
    console.print(f"wrote {what} to {output}", highlight=False)
