"""Read protection of the dashboard when ``read_requires_token`` is set.

A browser cannot send a bearer header by itself, so a token is entered once at ``/login``; the
answer stores it in an HttpOnly, SameSite=Strict cookie that every later page (and the dashboard's
own reads of the API) presents. The token is checked against the database on each request, so a
revoked token stops working at once. Pages without a valid token redirect to the login form.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from ablate.backend.db.models import TokenScope
from ablate.backend.services import tokens

COOKIE = "ablate_token"
LOGIN_URL = "/login"
COOKIE_MAX_AGE_S = 30 * 24 * 3600


class LoginRequired(Exception):
    """A page needs a read token and the request has none (or an unknown, revoked one)."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url

    @property
    def location(self) -> str:
        return f"{LOGIN_URL}?next={quote(self.next_url, safe='/')}"


def presented_secret(request: Request) -> str | None:
    """The token a request carries: its bearer header, else the login cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    return request.cookies.get(COOKIE) or None


def reads_token(request: Request, secret: str) -> str | None:
    """The name of the live token ``secret`` if it may read, else None."""
    with request.app.state.database.read() as session:
        token = tokens.authenticate(session, secret)
        if token is None or not tokens.Principal(token.id, token.name, token.scope).allows(TokenScope.read):
            return None
        return token.name


def safe_next(target: str | None) -> str:
    """Only a path of this site: ``//evil.example`` or ``https://...`` would leave it."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def local_url(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


async def require_page_reader(request: Request) -> None:
    """A page dependency: with ``read_requires_token``, no valid token means the login form."""
    if not request.app.state.settings.read_requires_token:
        return
    secret = presented_secret(request)
    if secret is None or await run_in_threadpool(reads_token, request, secret) is None:
        raise LoginRequired(local_url(request))
