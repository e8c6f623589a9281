"""Release comparison, two-set compare and report export. Thin: the work is in services and reports."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.domain.csp import content_security_policy
from ablate.backend.reports import MEDIA_TYPES, default_filename, render
from ablate.backend.reports.html import report_script_hashes
from ablate.backend.reports.json import render_json
from ablate.backend.schemas.common import MAX_ID_LIST, DbId, IdText, Line
from ablate.backend.services import comparison as svc
from ablate.backend.services.advice import release_advice
from ablate.backend.services.compare_sides import API_FIELDS, compare_sides, parse_sides
from ablate.backend.services.history import release_histories

router = APIRouter(tags=["comparison"], dependencies=[Depends(auth.read)])

RefQuery = Query(None, max_length=265, description="Baseline release IMAGE:TAG (default: the previous tag).")


class OptionsQuery(BaseModel):
    """The analysis options a comparison, a compare or a report takes from its query."""

    threshold_pct: float | None = Field(None, gt=0, le=100, description="Verdict threshold in percent.")
    alpha: float | None = Field(None, gt=0, lt=1, description="Significance level.")
    lookback: int | None = Field(None, ge=0, le=100, description="Releases the lookback uses (K).")
    metric: list[str] | None = Field(
        None,
        max_length=50,
        description="Metrics to analyse (repeatable). Default: throughput and peak memory.",
    )
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="Share-interval seed.")
    n_resamples: int | None = Field(None, ge=99, le=99_999, description="Share-interval draws.")
    busy_hosts: Literal["exclude", "include"] = Field(
        "exclude",
        description="Runs measured on a busy host (provenance host_busy): left out of the "
        "release-over-release verdicts and lookbacks (exclude, the default, with a note), or kept.",
    )


def _options(request: Request, query: Annotated[OptionsQuery, Query()]) -> svc.ComparisonOptions:
    return svc.ComparisonOptions.from_settings(
        request.app.state.settings,
        threshold_pct=query.threshold_pct,
        alpha=query.alpha,
        lookback=query.lookback,
        seed=query.seed,
        n_resamples=query.n_resamples,
        metrics=tuple(query.metric) if query.metric else None,
        busy_hosts=query.busy_hosts == "include",
    )


def _json(text: str) -> Response:
    # Canonical text from render_json, returned as is: the bytes of the exported JSON report, compact.
    return Response(content=text, media_type="application/json")


@router.get("/releases/{ref:path}/comparison", summary="Release comparison")
def release_comparison(
    ref: str,
    request: Request,
    baseline: str | None = RefQuery,
    options: svc.ComparisonOptions = Depends(_options),
) -> Response:
    """Ablation ladders, release-over-release verdicts (p, BH q), lookbacks, manifest diff, what is missing.

    Unknown release: 404 problem+json. A partial release still answers, listing what is missing.
    """
    with database(request).read() as session:
        result = svc.build_release_comparison(session, ref, baseline_ref=baseline, options=options)
    return _json(render_json(result, indent=None))


class SidesQuery(BaseModel):
    """The two sides of ``GET /compare``, each given one way: a release, run ids or a study."""

    baseline: Line | None = Field(None, max_length=265, description="Baseline release IMAGE:TAG.")
    contender: Line | None = Field(None, max_length=265, description="Contender release IMAGE:TAG.")
    baseline_runs: IdText | None = Field(None, max_length=MAX_ID_LIST, description="Comma-separated run ids.")
    contender_runs: IdText | None = Field(
        None, max_length=MAX_ID_LIST, description="Comma-separated run ids."
    )
    baseline_study: DbId | None = Field(None, description="All runs of this study.")
    contender_study: DbId | None = Field(None, description="All runs of this study.")


@router.get("/compare", summary="Compare two releases or two sets of runs")
def compare(
    request: Request,
    query: Annotated[SidesQuery, Query()],
    options: svc.ComparisonOptions = Depends(_options),
) -> Response:
    """Each side is given exactly one way: a release (``baseline``/``contender``), run ids
    (``baseline_runs=1,2,3``) or a study id (``baseline_study=7``); its label in the answer is the
    release's ref, ``3 runs`` or ``study #7`` (the same as on the dashboard's compare page).

    Two releases give the full release comparison (``kind: "release"``) of ``contender`` against
    ``baseline``. Anything else compares two sets of runs (``kind: "runs"``): cells (cluster,
    workload, variant) are paired by name; when each side holds a single cell, those two are
    compared whatever their names, e.g. three runs of one variant against three of another.
    """
    sides = parse_sides(API_FIELDS, query.model_dump())
    with database(request).read() as session:
        result = compare_sides(session, *sides, options=options)
    return _json(render_json(result, indent=None))


def content_disposition(kind: str, filename: str) -> str:
    """RFC 6266: an ASCII ``filename`` for old clients and the exact name as RFC 5987 ``filename*``."""
    fallback = re.sub(r"[^A-Za-z0-9._+:,@=-]", "_", filename) or "report"
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


_REPORT_TYPES: dict[str, dict[str, object]] = {
    "text/html": {},
    "text/markdown": {},
    "text/csv": {},
    "application/json": {},
}


@router.get(
    "/releases/{ref:path}/report",
    summary="Release report export",
    responses={200: {"description": "The report in the asked format", "content": _REPORT_TYPES}},
)
def release_report(
    ref: str,
    request: Request,
    format: Literal["html", "md", "csv", "json"] = Query("html", description="Report format."),
    baseline: str | None = RefQuery,
    timestamp: bool = Query(
        False, description="Stamp the body with the generation time (off: reproducible)."
    ),
    download: bool = Query(False, description="Content-Disposition attachment instead of inline."),
    options: svc.ComparisonOptions = Depends(_options),
) -> Response:
    """The report as one file: self-contained HTML (plotly.js inline), Markdown, CSV or JSON.

    Without ``timestamp`` the same data gives byte-identical output.
    """
    with database(request).read() as session:
        result = svc.build_release_comparison(session, ref, baseline_ref=baseline, options=options)
        advice = release_advice(session, ref)
        history = release_histories(session, result, options) if format == "html" else None
    stamp = datetime.now(UTC) if timestamp else None
    body = render(result, format, generated_at=stamp, advice=advice, history=history)
    disposition = "attachment" if download else "inline"
    headers = {"Content-Disposition": content_disposition(disposition, default_filename(result, format))}
    if format == "html":
        # The report's inline scripts (plotly.js, the figure drawer) are allowed by hash, nothing else.
        headers["Content-Security-Policy"] = content_security_policy(report_script_hashes())
    return Response(content=body, media_type=MEDIA_TYPES[format], headers=headers)
