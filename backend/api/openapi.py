"""The OpenAPI document: every status an operation can answer, with its problem+json schema, and the
bearer security scheme (Swagger UI's Authorize button).

The statuses follow from what a route is: every operation may answer 422 (the control-character
check applies to any path or query); one behind a token 401 (and 403 when it needs more than
``read``); one with path parameters or names 404; one with a body 400 (not JSON) and 413 (too large);
a write 409 (a conflicting definition, data stored meanwhile, a deletion refused while runs are
active).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, routing
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from ablate.backend.api.problems import PROBLEM
from ablate.backend.api.routes import results

BEARER = "bearer"


class FieldProblem(BaseModel):
    loc: str
    msg: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldProblem]


def _scope(route: Any) -> str | None:
    names = {getattr(d.call, "__name__", "") for d in route.dependant.dependencies}
    for scope in ("admin", "submit", "read"):
        if f"require_{scope}" in names:
            return scope
    return None


def _statuses(route: Any, method: str) -> set[int]:
    statuses = {422}
    scope = _scope(route)
    if scope is not None:
        statuses.add(401)
        if scope != "read":
            statuses.add(403)
    if route.dependant.path_params or route.dependant.query_params or method != "GET":
        statuses.add(404)
    if route.dependant.body_params or (route.openapi_extra or {}).get("requestBody"):
        statuses |= {400, 413}
    if method in ("POST", "PATCH", "DELETE"):
        statuses.add(409)
    if route.path != "/healthz":
        statuses.add(503)  # the database cannot be reached (with Retry-After); /readyz: not ready
    return statuses


def build(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(results.openapi_components())
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = {
        BEARER: {"type": "http", "scheme": "bearer", "description": "An API token: `ablate token create`."}
    }
    content = {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    plain = {"text/plain": {"schema": {"type": "string"}}}
    # Route contexts carry what included routers add (their prefix and dependencies).
    for route in routing.iter_route_contexts(app.routes):
        if not hasattr(route, "dependant") or not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = schema["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for status in sorted(_statuses(route, method)):
                responses[str(status)] = {"description": HTTPStatus(status).phrase, "content": content}
            # Any request: the server refuses a too long request line or head before routing it
            # (backend/server.py, ABLATE_MAX_URL_BYTES / ABLATE_MAX_HEADER_BYTES), in plain text.
            for status in (414, 431):
                responses[str(status)] = {"description": HTTPStatus(status).phrase, "content": plain}
            scope = _scope(route)
            if scope == "read":
                operation["security"] = [{}, {BEARER: []}]  # anonymous unless ABLATE_READ_REQUIRES_TOKEN
            elif scope is not None:
                operation["security"] = [{BEARER: []}]
    return schema


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    # FastAPI's documented way to extend the schema is to replace app.openapi; mypy sees a method.
    app.openapi = openapi  # type: ignore[method-assign]
