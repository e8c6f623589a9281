"""The OpenAPI document, Swagger UI (``/docs``) and ReDoc (``/redoc``), served without any CDN.

Their scripts and styles come from the installed ``fastapi-offline`` package, so the docs work on a
machine without internet. With ``read_requires_token`` the document needs a read token (bearer or
the dashboard's login cookie) and the two pages send a browser to the login form first.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from ablate.backend.api import auth
from ablate.backend.domain.csp import content_security_policy, inline_script_hashes
from ablate.backend.web.auth import require_page_reader
from ablate.backend.web.errors import PageRoute

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
        redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url="/static/favicon.svg",
        with_google_fonts=False,
    )


router.include_router(pages)


def assets() -> StaticFiles:
    return StaticFiles(directory=ASSETS_DIR)
