"""Run routes: the paged list, one run, its series and its log files."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field, StringConstraints

from ablate.backend.api import auth
from ablate.backend.api.deps import database
from ablate.backend.schemas.common import DbId, Line
from ablate.backend.schemas.runs import RunDetail, RunLogsOut, RunPage, SeriesOut
from ablate.backend.services import run_logs, runs
from ablate.backend.services.downsample import MIN_POINTS

router = APIRouter(tags=["runs"], dependencies=[Depends(auth.read)])


def _name(what: str) -> Any:
    # A fresh Field per parameter: pydantic binds the FieldInfo to one field name.
    return Field(None, max_length=265, description=f"Only runs of this {what}.")


def _names(what: str) -> Any:
    return Field(None, max_length=20, description=f"Only runs of this {what}; repeat it for any of several.")


Filter = Line | None
# Each name as long as a release ref may be (image:tag).
Filters = list[Annotated[Line, StringConstraints(max_length=265)]] | None


class RunListQuery(BaseModel):
    """The query of ``GET /runs``: its filters and the page asked for."""

    release: Filters = _names("release (image:tag)")
    variant: Filters = _names("variant")
    workload: Filter = _name("workload")
    cluster: Filter = _name("cluster")
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None
    source: Literal["scheduled", "ci"] | None = None
    study_id: DbId | None = None
    excluded: bool | None = Field(
        None, description="true: only excluded runs; false: only runs analyses read"
    )
    cursor: Line | None = Field(None, max_length=200, description="next_cursor of the previous page")
    limit: int = Field(50, ge=1, le=runs.MAX_PAGE)


@router.get("/runs", response_model=RunPage)
def list_runs(request: Request, query: Annotated[RunListQuery, Query()]) -> Any:
    """Runs, newest first. Filters combine; ``next_cursor`` is null on the last page."""
    filters = runs.RunFilters(
        query.release,
        query.variant,
        query.workload,
        query.cluster,
        query.status,
        query.source,
        query.study_id,
        excluded=query.excluded,
    )
    with database(request).read() as session:
        items, next_cursor = runs.list_runs(session, filters, cursor=query.cursor, limit=query.limit)
    return {"items": items, "next_cursor": next_cursor}


@router.get("/runs/{run_id}", response_model=RunDetail)
def get_run(run_id: DbId, request: Request) -> Any:
    """One run with summary metrics, series summaries, provenance and progress."""
    with database(request).read() as session:
        return runs.run_detail(session, run_id)


@router.get("/runs/{run_id}/series/{metric}", response_model=SeriesOut)
def get_series(
    run_id: DbId,
    request: Request,
    metric: Annotated[Line, Path(max_length=200)],
    max_points: int | None = Query(
        None, ge=MIN_POINTS, le=1_000_000, description="Downsample (min-max buckets) to at most this many."
    ),
) -> Any:
    with database(request).read() as session:
        return runs.run_series(session, run_id, metric, max_points=max_points)


@router.get("/runs/{run_id}/logs", response_model=RunLogsOut)
def list_logs(run_id: DbId, request: Request) -> Any:
    """The run's log files, per attempt (a retry keeps the failed attempt's files): one per node (per rank
    where the runner has ranks), with host and size; and every attempt with its outcome and reason."""
    with database(request).read() as session:
        found = run_logs.attempts(session, run_id, request.app.state.settings.log_dir)
    attempts = [a.to_dict() for a in found]
    for a in attempts:
        for item in a["files"]:
            url = request.url_for("get_log", run_id=run_id, name=item["name"]).path
            item["url"] = f"{url}?attempt={item['attempt']}"
    return {"items": [f for a in attempts for f in a["files"]], "attempts": attempts}


ATTEMPT = Query(
    None,
    ge=0,
    le=999_999,
    description="The attempt whose file to read (0: the files kept before each attempt had its own log "
    "folder); left out: the newest attempt that has a file of this name.",
)


@router.get("/runs/{run_id}/logs/{name}", response_class=FileResponse)
def get_log(
    run_id: DbId,
    request: Request,
    name: Annotated[Line, Path(max_length=64)],
    attempt: int | None = ATTEMPT,
) -> Any:
    """One log file of the run, as plain text (names and attempts as ``GET /runs/{id}/logs`` lists them)."""
    with database(request).read() as session:
        path = run_logs.log_file(session, run_id, name, request.app.state.settings.log_dir, attempt)
    shown = f"run-{run_id}-attempt-{attempt}-{name}" if attempt else f"run-{run_id}-{name}"
    return FileResponse(path, media_type="text/plain; charset=utf-8", filename=shown)
