"""Bearer-token authentication as FastAPI dependencies: ``Depends(require("submit"))``.

No token: 401. Unknown or revoked token: 401. Token without the scope: 403. Reads are open unless
``read_requires_token`` is set. Secrets are never logged: only the token's name reaches logs.

Reads also accept the dashboard's login cookie (``ablate.backend.dashboard.auth``), so the pages' own
scripts can read the API; writes need the bearer header (a cookie would make them forgeable).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ablate.backend.dashboard.auth import COOKIE
from ablate.backend.db.base import utcnow
from ablate.backend.db.models import ApiToken, TokenScope
from ablate.backend.services import tokens
from ablate.backend.services.errors import Forbidden, Unauthorized
from ablate.backend.services.tokens import Principal


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return secret.strip()


def authenticate(request: Request, secret: str | None = None) -> Principal | None:
    secret = secret or _bearer(request)
    if secret is None:
        return None
    database = request.app.state.database
    with database.read() as session:
        token = _live_token(session, secret)
        principal = Principal(token.id, token.name, token.scope)
        stale = token.last_used_at
    if stale is None or utcnow() - stale > tokens.TOUCH_EVERY:
        with database.transaction() as session:
            live = session.get(ApiToken, principal.token_id)
            if live is not None:
                tokens.touch(session, live)
    return principal


def _live_token(session: Session, secret: str) -> ApiToken:
    token, refusal = tokens.check(session, secret)
    if token is None or refusal is not None:
        raise Unauthorized(refusal or "the token is unknown or revoked")
    return token


def _check_scope(principal: Principal, scope: str) -> None:
    if not principal.allows(scope):
        raise Forbidden(f"token {principal.name!r} has scope {principal.scope!r}; this needs {scope!r}")


def check_in(session: Session, secret: str, scope: str) -> Principal:
    """:func:`require`'s check in the caller's session: the token of ``secret`` (401 when unknown,
    revoked or expired; 403 without ``scope``), its last use recorded in the same transaction. For a
    route that checks the token in the transaction it writes in (one connection checkout and one
    transaction fewer per request); :func:`bearer` gives it the secret."""
    token = _live_token(session, secret)
    principal = Principal(token.id, token.name, token.scope)
    _check_scope(principal, scope)
    tokens.touch(session, token)
    return principal


def bearer(scope: str) -> Callable[[Request], Awaitable[str]]:
    """A dependency giving the bearer secret, checked later by :func:`check_in` (401 without one)."""

    async def dependency(request: Request) -> str:
        secret = _bearer(request)
        if secret is None:
            raise Unauthorized(f"this endpoint needs a token with scope {scope!r}")
        return secret

    dependency.__name__ = f"require_{scope}"  # the OpenAPI document's 401 and 403 follow this name
    return dependency


def require(scope: str) -> Callable[[Request], Awaitable[Principal | None]]:
    """A dependency that lets the request through with ``scope`` (or higher), else 401/403."""

    async def dependency(request: Request) -> Principal | None:
        # Anonymous requests are decided without a thread hop; token lookups go to the thread pool.
        principal = None
        cookie = request.cookies.get(COOKIE) if scope == TokenScope.read else None
        if request.headers.get("authorization") is not None:
            principal = await run_in_threadpool(authenticate, request)
        elif cookie:
            principal = await run_in_threadpool(authenticate, request, cookie)
        if principal is None:
            if scope == TokenScope.read and not request.app.state.settings.read_requires_token:
                return None
            raise Unauthorized(f"this endpoint needs a token with scope {scope!r}")
        _check_scope(principal, scope)
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


async def metrics_reader(request: Request) -> Principal | None:
    """``/metrics``: open unless ``metrics_requires_token``; then any live token (a scraper's)."""
    if not request.app.state.settings.metrics_requires_token:
        return None
    if request.headers.get("authorization") is None:
        raise Unauthorized("/metrics needs a token (ABLATE_METRICS_REQUIRES_TOKEN is set)")
    return await read(request)


read = require(TokenScope.read.value)
submit = require(TokenScope.submit.value)
admin = require(TokenScope.admin.value)
