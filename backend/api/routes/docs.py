"""The OpenAPI document, Swagger UI (``/docs``) and ReDoc (``/redoc``), served without any CDN.

Their scripts and styles come from the installed ``fastapi-offline`` package, so the docs work on a
machine without internet. With ``read_requires_token`` the document needs a read token (bearer or
the dashboard's login cookie) and the two pages send a browser to the login form first.
"""

from __future__ import annotations

import functools
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from ablate.backend.api import auth
from ablate.backend.dashboard.auth import require_page_reader
from ablate.backend.dashboard.errors import PageRoute
from ablate.backend.domain.csp import content_security_policy, inline_script_hashes

OPENAPI_URL = "/api/v1/openapi.json"
ASSETS_URL = "/docs/assets"
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"

router = APIRouter(include_in_schema=False)
pages = APIRouter(include_in_schema=False, route_class=PageRoute, dependencies=[Depends(require_page_reader)])


@router.get(OPENAPI_URL, dependencies=[Depends(auth.read)])
def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@pages.get("/docs", response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=f"{request.app.title} API",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url="/static/favicon.svg",
        swagger_ui_parameters={"persistAuthorization": False, "validatorUrl": None},
    )
    # Swagger UI starts from one inline script: the policy allows exactly that script by its hash.
    html = bytes(page.body).decode("utf-8")
    page.headers["content-security-policy"] = content_security_policy(inline_script_hashes(html))
    return page


@pages.get("/redoc", response_class=HTMLResponse)
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=OPENAPI_URL,
        title=f"{request.app.title} API",
        redoc_js_url=REDOC_JS_URL,
        redoc_favicon_url="/static/favicon.svg",
        with_google_fonts=False,
    )


# ReDoc's sidebar footer always shows Redocly's logo, loaded from their CDN (the policy blocked it and
# the browser reported it): the bundle is served with our own icon in its place.
REDOC_JS_URL = "/docs/redoc.js"
REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
LOCAL_LOGO = b"/static/favicon.svg"


@functools.cache
def _redoc_js() -> bytes:
    return (ASSETS_DIR / "redoc.standalone.js").read_bytes().replace(REDOC_CDN_LOGO, LOCAL_LOGO)


@router.get(REDOC_JS_URL)
def redoc_js() -> Response:
    return Response(_redoc_js(), media_type="text/javascript")


router.include_router(pages)


def assets() -> StaticFiles:
    return StaticFiles(directory=ASSETS_DIR)
