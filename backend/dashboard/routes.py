"""Page routes of the dashboard: thin handlers that build a view model and render its template.

Every handler opens one read session, asks a view in ``ablate.backend.dashboard.views`` for its data and
renders.
Expected failures (unknown release, run or study; bad filter) become HTML error pages via
:class:`~ablate.backend.dashboard.errors.PageRoute`.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ablate.backend.charts import DRAW_FIGURES_JS, plotly_js_source
from ablate.backend.dashboard import auth
from ablate.backend.dashboard.errors import PageRoute
from ablate.backend.dashboard.filters import Filters
from ablate.backend.dashboard.paths import DRAW_FIGURES_URL, PLOTLY_URL
from ablate.backend.dashboard.templating import render
from ablate.backend.dashboard.views import audit, clusters, compare, home, release, run, runlist, studies
from ablate.backend.db.database import Database
from ablate.backend.schemas.common import MAX_ID_LIST, DbId, IdText
from ablate.backend.services import run_logs

router = APIRouter(route_class=PageRoute, include_in_schema=False)
# What must stay reachable without a token: the login form and the (public) plotly library.
open_router = APIRouter(route_class=PageRoute, include_in_schema=False)
pages = APIRouter(
    route_class=PageRoute, include_in_schema=False, dependencies=[Depends(auth.require_page_reader)]
)


def _db(request: Request) -> Database:
    return request.app.state.database


@open_router.get(PLOTLY_URL)
def plotly_js() -> Response:
    """plotly.js of the installed plotly package: the dashboard works offline and never uses a CDN."""
    # The URL carries the plotly version (?v=...), so a year of caching is safe.
    return Response(
        plotly_js_source(),
        media_type="application/javascript",
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


@open_router.get(DRAW_FIGURES_URL)
def draw_figures_js() -> Response:
    """The script that draws every figure of a page from its JSON data block (no inline script)."""
    return Response(
        DRAW_FIGURES_JS, media_type="application/javascript", headers={"Cache-Control": "no-cache"}
    )


@pages.get("/clusters", response_class=HTMLResponse)
def clusters_page(request: Request) -> Response:
    with _db(request).read() as session:
        page = clusters.clusters_page(session)
    return render(request, "clusters.html", {"section": "clusters", "page": page})


@pages.get("/studies", response_class=HTMLResponse)
def studies_page(request: Request) -> Response:
    with _db(request).read() as session:
        items = studies.study_items(session)
    return render(request, "studies.html", {"section": "studies", "items": items})


@pages.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(request: Request, study_id: DbId) -> Response:
    with _db(request).read() as session:
        page = studies.study_page(session, study_id)
    return render(request, "study.html", {"section": "studies", "page": page})


@pages.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request) -> Response:
    """The runs behind a number: the filters of ``GET /api/v1/runs``, plus ``ids`` and ``study``."""
    with _db(request).read() as session:
        page = runlist.run_list_page(session, request.query_params)
    return render(request, "runs.html", {"section": "releases", "page": page})


@pages.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: DbId) -> Response:
    with _db(request).read() as session:
        page = run.run_page(session, run_id, request.app.state.settings.log_dir)
    return render(request, "run.html", {"section": "releases", "page": page, "charts": page.chart_html})


@pages.get("/runs/{run_id}/logs/{name}")
def run_log(
    request: Request,
    run_id: DbId,
    name: Annotated[str, Path(max_length=64)],
    attempt: Annotated[int | None, Query(ge=0, le=999_999)] = None,
) -> Response:
    """One log file of a run (a node's, or a rank's) of one attempt (0: the earlier single-folder layout;
    left out: the newest attempt that has it), as plain text."""
    with _db(request).read() as session:
        path = run_logs.log_file(session, run_id, name, request.app.state.settings.log_dir, attempt)
    return FileResponse(path, media_type="text/plain; charset=utf-8")


@pages.get("/", response_class=HTMLResponse)
def home_page(request: Request) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = home.home_page(session, filters, request.app.state.settings)
    return render(request, "home.html", {"section": "home", "page": page})


@pages.get("/releases", response_class=HTMLResponse)
def releases_page(request: Request) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = home.releases_page(session, filters)
    return render(request, "releases.html", {"section": "releases", "page": page})


@pages.get("/releases/{ref:path}", response_class=HTMLResponse)
def release_page(request: Request, ref: str) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        page = release.release_page(session, ref, filters, request.app.state.settings, request.query_params)
        changes = audit.release_changes(session, page.comparison.release.ref)
    context = {"section": "releases", "page": page, "charts": page.chart_count, "changes": changes}
    return render(request, "release.html", context)


@pages.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    a: str = Query("", max_length=265),
    b: str = Query("", max_length=265),
    baseline_runs: Annotated[IdText, Query(max_length=MAX_ID_LIST)] = "",
    contender_runs: Annotated[IdText, Query(max_length=MAX_ID_LIST)] = "",
    baseline_study: Annotated[IdText, Query(max_length=20)] = "",
    contender_study: Annotated[IdText, Query(max_length=20)] = "",
) -> Response:
    filters = Filters.from_request(request)
    with _db(request).read() as session:
        query = compare.CompareQuery(
            a=a.strip(),
            b=b.strip(),
            baseline_runs=baseline_runs.strip(),
            contender_runs=contender_runs.strip(),
            baseline_study=baseline_study.strip(),
            contender_study=contender_study.strip(),
        )
        page = compare.compare_page(session, filters, request.app.state.settings, query)
    return render(request, "compare.html", {"section": "compare", "page": page, "charts": page.chart_count})


MAX_LOGIN_BODY = 4_096


def _login_page(request: Request, next_url: str, *, error: str = "", status_code: int = 200) -> Response:
    context = {
        "next": auth.safe_next(next_url),
        "error": error,
        "signed_in": bool(request.cookies.get(auth.COOKIE)),
    }
    return render(request, "login.html", context, status_code=status_code)


@open_router.get(auth.LOGIN_URL, response_class=HTMLResponse)
def login_form(request: Request, next: str = Query("/", max_length=2_000)) -> Response:
    return _login_page(request, next)


@open_router.post(auth.LOGIN_URL, response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the token once and keep it in an HttpOnly, SameSite=Strict cookie; then go back."""
    body = await request.body()
    form = parse_qs(body[:MAX_LOGIN_BODY].decode("utf-8", errors="replace"), max_num_fields=10)
    secret = (form.get("token") or [""])[0].strip()
    next_url = auth.safe_next((form.get("next") or ["/"])[0])
    if not secret or await run_in_threadpool(auth.reads_token, request, secret) is None:
        return _login_page(
            request, next_url, error="That token is unknown, revoked or cannot read.", status_code=401
        )
    response = RedirectResponse(next_url, status_code=303)
    response.set_cookie(
        auth.COOKIE,
        secret,
        max_age=auth.COOKIE_MAX_AGE_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@open_router.post("/logout")
def logout() -> Response:
    response = RedirectResponse(auth.LOGIN_URL, status_code=303)
    response.delete_cookie(auth.COOKIE, path="/", httponly=True, samesite="strict")
    return response


router.include_router(open_router)
router.include_router(pages)
