"""RFC 9457 problem details for every error the API returns, never a stack trace.

Body: ``{"type", "title", "status", "detail", "errors": [{"loc", "msg"}]}`` with media type
``application/problem+json``. ``loc`` is a path into the request such as
``results[3].metrics.throughput_tokens_per_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, routing
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ablate.backend.db.database import unavailable
from ablate.backend.schemas.common import UNION_TAGS
from ablate.backend.services.errors import RETRY_AFTER_S, UNAVAILABLE_DETAIL, FieldError, ProblemError

log = logging.getLogger("ablate.api")

PROBLEM = "application/problem+json"


def problem(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    type_: str = "about:blank",
    errors: Iterable[FieldError] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": type_,
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "errors": [e.as_dict() for e in errors],
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def format_loc(loc: Sequence[str | int], *, drop_body: bool = True) -> str:
    """``("body", "results", 3, "metrics", "x")`` -> ``results[3].metrics.x``."""
    parts = list(loc)
    if drop_body and parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in UNION_TAGS:
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    return [FieldError(format_loc(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in errors]


def validation_problem(errors: list[FieldError]) -> JSONResponse:
    first = f"{errors[0].loc}: {errors[0].msg}" if errors else "invalid request"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return problem(
        422, first + more, title="Invalid input", type_="urn:ablate:problem:validation", errors=errors
    )


def json_problem(detail: str) -> JSONResponse:
    return problem(400, detail, title="Malformed JSON", type_="urn:ablate:problem:malformed-json")


def pydantic_problem(exc: ValidationError) -> JSONResponse:
    raw = exc.errors(include_url=False, include_input=False)
    bad_json = [e for e in raw if e.get("type") == "json_invalid"]
    if bad_json:
        return json_problem(f"request body is not valid JSON: {bad_json[0].get('msg')}")
    return validation_problem(field_errors(raw))


def allowed_methods(request: Request) -> str:
    """Every method some route of the app answers on this path (RFC 9110's ``Allow`` of a 405).

    Starlette's 405 names only the methods of the first route whose path matched: ``PATCH
    /api/v1/studies`` said ``Allow: POST`` although ``GET`` is served by another route.
    """
    path = request.scope["path"]
    methods: set[str] = set()
    # Route contexts: the routes of included routers with their prefixes (as the OpenAPI build reads them).
    for route in routing.iter_route_contexts(request.app.routes):
        regex, own = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and own and regex.match(path):
            methods |= set(own)
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    @app.exception_handler(ProblemError)
    async def _problem(_request: Request, exc: ProblemError) -> JSONResponse:
        return problem(
            exc.status,
            exc.detail,
            title=exc.title,
            type_=exc.type,
            errors=exc.errors,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        decode = [e for e in raw if e.get("type") == "json_invalid"]
        if decode:
            return json_problem("request body is not valid JSON")
        errors = [FieldError(format_loc(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in raw]
        return validation_problem(errors)

    @app.exception_handler(ValidationError)
    async def _validation(_request: Request, exc: ValidationError) -> JSONResponse:
        return pydantic_problem(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).description
        if exc.status_code == 404 and detail == "Not Found":
            detail = "no such resource"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request) or headers.get("Allow", "")
        return problem(exc.status_code, detail, headers=headers)

    @app.exception_handler(IntegrityError)
    async def _integrity(_request: Request, exc: IntegrityError) -> JSONResponse:
        # A concurrent request stored the same name or key first; the statement itself is not shown.
        return problem(
            409,
            "conflicts with data stored meanwhile (a unique name or key); retry to see it",
            title="Conflict",
            type_="urn:ablate:problem:conflict",
        )

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        if not unavailable(exc):
            return await _internal(request, exc)
        log.warning(
            "database unavailable on %s %s: %s", request.method, request.url.path, exc.__class__.__name__
        )
        return problem(
            503,
            UNAVAILABLE_DETAIL,
            type_="urn:ablate:problem:unavailable",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal error; the server log has the details")
