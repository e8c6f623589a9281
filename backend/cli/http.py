"""What commands that talk to a server share: its URL, the token, and a refused request as one line."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from ablate.backend.cli.common import settings
from ablate.backend.errors import AblateError


def server_url(server: str | None) -> str:
    """The server's base URL (``--server`` or ``ABLATE_SERVER_URL``), refused at once when it cannot
    be one: a URL without ``http://`` would otherwise be retried as a connection error for seconds."""
    url = (server or settings().server_url).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AblateError(
            f"server URL {url!r} needs a scheme and a host, e.g. http://{url or 'localhost:8000'}"
        )
    return url


def auth_headers(token: str | None) -> dict[str, str]:
    secret = token or settings().token.get_secret_value()
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def client(server: str | None, token: str | None, *, timeout: float = 60.0) -> httpx.Client:
    """An HTTP client bound to the server's ``/api/v1`` with the token's header."""
    return httpx.Client(base_url=f"{server_url(server)}/api/v1", headers=auth_headers(token), timeout=timeout)


def describe_problem(response: httpx.Response) -> str:
    """A refused request as one line: status, title, detail and the first few field errors."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}: {body!r}"[:500]
    message = f"HTTP {response.status_code} {body.get('title', '')}: {body.get('detail', '')}".strip()
    errors = body.get("errors") or []
    if len(errors) > 1:
        message += "; " + "; ".join(f"{e.get('loc')}: {e.get('msg')}" for e in errors[1:5])
    return message


def request_json(http: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    """One request whose success is JSON; a transport failure or a refusal ends as an AblateError."""
    try:
        response = http.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise AblateError(f"cannot reach {http.base_url}: {exc}") from None
    if response.status_code >= 400:
        raise AblateError(describe_problem(response))
    return response.json()
