"""HTML error pages for the dashboard's routes (the JSON API keeps its problem+json bodies).

Page routes use :class:`PageRoute`, which catches the services' expected errors (an unknown release,
run or study; a malformed filter) and the request's validation errors and renders them as an HTML page
with the message and the right status. Only routes of the page router use it, so API responses are
never touched. :func:`install_error_pages` does the same for unknown non-API paths.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response

from ablate.backend.dashboard.auth import LoginRequired
from ablate.backend.dashboard.templating import render
from ablate.backend.db.database import unavailable
from ablate.backend.services.errors import RETRY_AFTER_S, UNAVAILABLE_DETAIL, NotFound, ProblemError

log = logging.getLogger(__name__)

API_PREFIXES = ("/api/", "/docs", "/redoc", "/healthz", "/readyz", "/metrics")


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    return render(
        request,
        "error.html",
        {"status": status, "title": title, "message": message},
        status_code=status,
    )


def is_page_path(path: str) -> bool:
    """True for paths the dashboard answers in HTML (everything that is not API, docs or probes)."""
    return not (path == "/api" or path.startswith(API_PREFIXES))


class PageRoute(APIRoute):
    """An APIRoute whose expected failures become HTML pages instead of problem+json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired as exc:
                return RedirectResponse(exc.location, status_code=303)
            except ProblemError as exc:
                # "release 'x:1' does not exist" reads better than its API form "release: release ...".
                single = isinstance(exc, NotFound) and len(exc.errors) == 1
                message = exc.errors[0].msg if single else exc.detail
                return error_page(request, exc.status, exc.title, message)
            except RequestValidationError as exc:
                parts = [
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()
                ]
                return error_page(request, 422, "Invalid request", "; ".join(parts) or "invalid request")
            except StarletteHTTPException as exc:
                return error_page(request, exc.status_code, "Error", str(exc.detail))
            except Exception as exc:
                if unavailable(exc):
                    log.warning("database unavailable on page %s: %s", request.url.path, type(exc).__name__)
                    page = error_page(
                        request, 503, "Database unavailable", UNAVAILABLE_DETAIL.capitalize() + "."
                    )
                    page.headers["Retry-After"] = str(RETRY_AFTER_S)
                    return page
                # A bug, not an expected failure: log the traceback, show the reader a page without it.
                log.exception("dashboard page %s failed", request.url.path)
                return error_page(
                    request, 500, "Internal error", "This page failed to render; see the server log."
                )

        return page_handler


def install_error_pages(app: FastAPI) -> None:
    """Answer unknown dashboard paths with an HTML 404 page; everything else goes to the API's handler.

    Call after the API installs its problem+json handlers: the handler registered for HTTPException
    then is theirs, and this one delegates to it for API paths and for every status but 404.
    """
    api_handler = app.exception_handlers.get(StarletteHTTPException)

    async def handler(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404 and is_page_path(request.url.path):
            return error_page(request, 404, "Not found", f"There is no page at {request.url.path}.")
        if api_handler is None:
            return await http_exception_handler(request, exc)
        result = api_handler(request, exc)
        return await result if inspect.isawaitable(result) else result

    app.add_exception_handler(StarletteHTTPException, handler)
