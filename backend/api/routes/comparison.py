"""Release comparison, two-set compare and report export. Thin: the work is in services and reports."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.reports import MEDIA_TYPES, default_filename, render
from ablate.backend.reports.json import render_json
from ablate.backend.schemas.common import MAX_ID_LIST, DbId, IdText, Line
from ablate.backend.services import comparison as svc
from ablate.backend.services.errors import ValidationProblem

router = APIRouter(tags=["comparison"], dependencies=[Depends(auth.read)])

RefQuery = Query(None, max_length=265, description="Baseline release IMAGE:TAG (default: the previous tag).")


def _options(
    request: Request,
    threshold_pct: float | None = Query(None, gt=0, le=100, description="Verdict threshold in percent."),
    alpha: float | None = Query(None, gt=0, lt=1, description="Significance level."),
    lookback: int | None = Query(None, ge=0, le=100, description="Releases in the lookback z-score."),
    metric: list[str] | None = Query(
        None,
        max_length=50,
        description="Metrics to analyse (repeatable). Default: throughput and peak memory.",
    ),
    seed: int | None = Query(None, ge=0, le=2**32 - 1, description="Bootstrap seed."),
    n_resamples: int | None = Query(None, ge=99, le=99_999, description="Bootstrap resamples."),
) -> svc.ComparisonOptions:
    return svc.ComparisonOptions.from_settings(
        request.app.state.settings,
        threshold_pct=threshold_pct,
        alpha=alpha,
        lookback=lookback,
        seed=seed,
        n_resamples=n_resamples,
        metrics=tuple(metric) if metric else None,
    )


def _json(text: str) -> Response:
    # Canonical text from render_json, returned as is (compact: the C encoder is several times faster).
    return Response(content=text, media_type="application/json")


@router.get("/releases/{ref:path}/comparison", summary="Release comparison")
def release_comparison(
    ref: str,
    request: Request,
    baseline: str | None = RefQuery,
    options: svc.ComparisonOptions = Depends(_options),
) -> Response:
    """Ablation ladders, release-over-release verdicts, lookback z-scores, manifest diff and what is missing.

    Unknown release: 404 problem+json. A partial release still answers, listing what is missing.
    """
    with database(request).read() as session:
        result = svc.build_release_comparison(session, ref, baseline_ref=baseline, options=options)
    return _json(render_json(result, indent=None))


@router.get("/compare", summary="Compare two releases or two sets of runs")
def compare(
    request: Request,
    baseline: Line | None = Query(None, max_length=265, description="Baseline release IMAGE:TAG."),
    contender: Line | None = Query(None, max_length=265, description="Contender release IMAGE:TAG."),
    baseline_runs: IdText | None = Query(
        None, max_length=MAX_ID_LIST, description="Comma-separated run ids."
    ),
    contender_runs: IdText | None = Query(
        None, max_length=MAX_ID_LIST, description="Comma-separated run ids."
    ),
    baseline_study: DbId | None = Query(None, description="All runs of this study."),
    contender_study: DbId | None = Query(None, description="All runs of this study."),
    options: svc.ComparisonOptions = Depends(_options),
) -> Response:
    """Each side is given exactly one way: a release (``baseline``/``contender``), run ids
    (``baseline_runs=1,2,3``) or a study id (``baseline_study=7``).

    Two releases give the full release comparison (``kind: "release"``) of ``contender`` against
    ``baseline``. Anything else compares two sets of runs (``kind: "runs"``): cells (cluster,
    workload, variant) are paired by name; when each side holds a single cell, those two are
    compared whatever their names, e.g. three runs of one variant against three of another.
    """
    sides = {
        "baseline": (baseline, baseline_runs, baseline_study),
        "contender": (contender, contender_runs, contender_study),
    }
    for side, given in sides.items():
        if sum(x is not None for x in given) != 1:
            raise ValidationProblem.at(side, f"give exactly one of {side}, {side}_runs, {side}_study")
    with database(request).read() as session:
        if baseline is not None and contender is not None:
            result: svc.ReleaseComparison | svc.RunSetComparison = svc.build_release_comparison(
                session, contender, baseline_ref=baseline, options=options
            )
        else:
            ids = {}
            labels = {}
            for side, (ref, runs, study) in sides.items():
                if ref is not None:
                    ids[side] = svc.release_run_ids(session, ref, side)
                    labels[side] = ref
                elif runs is not None:
                    ids[side] = svc.parse_run_ids(runs, f"{side}_runs")
                    labels[side] = f"runs {runs}"
                else:
                    ids[side] = svc.study_run_ids(session, int(study), f"{side}_study")  # type: ignore[arg-type]
                    labels[side] = f"study {study}"
            result = svc.compare_run_sets(
                session,
                ids["baseline"],
                ids["contender"],
                baseline_label=labels["baseline"],
                contender_label=labels["contender"],
                options=options,
            )
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
    body = render(result, format, generated_at=datetime.now(UTC) if timestamp else None)
    disposition = "attachment" if download else "inline"
    return Response(
        content=body,
        media_type=MEDIA_TYPES[format],
        headers={"Content-Disposition": content_disposition(disposition, default_filename(result, format))},
    )
