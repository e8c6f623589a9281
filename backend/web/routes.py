"""Page routes of the dashboard: thin handlers that build a view model and render its template.

Every handler opens one read session, asks a view in ``ablate.backend.web.views`` for its data and renders.
Expected failures (unknown release, run or study; bad filter) become HTML error pages via
:class:`~ablate.backend.web.errors.PageRoute`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from ablate.backend.charts import plotly_js_source
from ablate.backend.db.database import Database
from ablate.backend.schemas.common import DbId, IdText
from ablate.backend.web.errors import PageRoute
from ablate.backend.web.filters import Filters
from ablate.backend.web.paths import PLOTLY_URL
from ablate.backend.web.templating import render
from ablate.backend.web.views import clusters, compare, home, release, run, studies

router = APIRouter(route_class=PageRoute, include_in_schema=False)


def _db(request: Request) -> Database:
    return request.app.state.database


@router.get(PLOTLY_URL)
def plotly_js() -> Response:
    """plotly.js of the installed plotly package: the dashboard works offline and never uses a CDN."""
    # The URL carries the plotly version (?v=...), so a year of caching is safe.
    return Response(
        plotly_js_source(),
        media_type="application/javascript",
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


@router.get("/clusters", response_class=HTMLResponse)
def clusters_page(request: Request) -> Response:
    with _db(request).read() as session:
        page = clusters.clusters_page(session)
    return render(request, "clusters.html", {"section": "clusters", "page": page})


@router.get("/studies", response_class=HTMLResponse)
def studies_page(request: Request) -> Response:
    with _db(request).read() as session:
        items = studies.study_items(session)
    return render(request, "studies.html", {"section": "studies", "items": items})


@router.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(request: Request, study_id: DbId) -> Response:
    with _db(request).read() as session:
        page = studies.study_page(session, study_id)
    return render(request, "study.html", {"section": "studies", "page": page})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: DbId) -> Response:
    with _db(request).read() as session:
        page = run.run_page(session, run_id)
    return render(request, "run.html", {"section": "releases", "page": page, "charts": page.chart_html})


@router.get("/", response_class=HTMLResponse)
def home_page(request: Request) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = home.home_page(session, filters, request.app.state.settings)
    return render(request, "home.html", {"section": "home", "page": page})


@router.get("/releases", response_class=HTMLResponse)
def releases_page(request: Request) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = home.releases_page(session, filters)
    return render(request, "releases.html", {"section": "releases", "page": page})


@router.get("/releases/{ref:path}", response_class=HTMLResponse)
def release_page(request: Request, ref: str) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = release.release_page(session, ref, filters, request.app.state.settings)
    return render(request, "release.html", {"section": "releases", "page": page, "charts": page.chart_count})


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    a: str = Query("", max_length=265),
    b: str = Query("", max_length=265),
    baseline_runs: Annotated[IdText, Query(max_length=100_000)] = "",
    contender_runs: Annotated[IdText, Query(max_length=100_000)] = "",
    baseline_study: Annotated[IdText, Query(max_length=20)] = "",
    contender_study: Annotated[IdText, Query(max_length=20)] = "",
) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = compare.compare_page(
            session,
            filters,
            request.app.state.settings,
            a=a.strip(),
            b=b.strip(),
            baseline_runs=baseline_runs.strip(),
            contender_runs=contender_runs.strip(),
            baseline_study=baseline_study.strip(),
            contender_study=contender_study.strip(),
        )
    return render(request, "compare.html", {"section": "compare", "page": page, "charts": page.chart_count})
