"""ASGI middleware: the request-body cap, request metrics, control characters in URLs, security headers.

Plain ASGI (not ``BaseHTTPMiddleware``) so bodies stream through untouched and nothing is buffered.
"""

from __future__ import annotations

import json
import re
import time
from urllib.parse import unquote_plus

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ablate.backend.api.problems import PROBLEM
from ablate.backend.domain.csp import content_security_policy


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a body without (or lying about) Content-Length passes the cap.

    An HTTPException so FastAPI's body reader re-raises it and the problem handler answers 413.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


async def _send_problem(send: Send, problem: dict[str, object]) -> None:
    body = json.dumps(problem).encode()
    await send(
        {
            "type": "http.response.start",
            "status": problem["status"],
            "headers": [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _send_413(send: Send, limit: int) -> None:
    detail = f"request body exceeds the limit of {limit} bytes"
    await _send_problem(
        send,
        {
            "type": "urn:ablate:problem:payload-too-large",
            "title": "Payload too large",
            "status": 413,
            "detail": detail,
            "errors": [],
        },
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ControlCharacterMiddleware:
    """422 for a path or query value holding NUL or another control character (``/runs?variant=%00``).

    No name, ref or filter may contain one (the request schemas refuse them too), and PostgreSQL
    cannot even compare text with NUL; refusing them here covers every route, API and dashboard alike.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = unquote_plus(scope.get("query_string", b"").decode("latin-1"), errors="replace")
            where = "path" if _CONTROL.search(scope.get("path", "")) else ""
            where = where or ("query" if _CONTROL.search(query) else "")
            if where:
                msg = "must not contain control characters (NUL, line breaks, ...)"
                await _send_problem(
                    send,
                    {
                        "type": "urn:ablate:problem:validation",
                        "title": "Invalid input",
                        "status": 422,
                        "detail": f"{where}: {msg}",
                        "errors": [{"loc": where, "msg": msg}],
                    },
                )
                return
        await self.app(scope, receive, send)


# No inline script anywhere on the dashboard: a route that needs one (Swagger UI, the report) sets
# its own policy with the script's hash (ablate.backend.domain.csp).
CONTENT_SECURITY_POLICY = content_security_policy()
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeadersMiddleware:
    """The security headers on every response (a route's own value of one of them wins)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyLimitMiddleware:
    """413 before parsing: by Content-Length up front, and by counting what actually streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await _send_413(send, self.max_bytes)
                    return
        seen = 0
        limit = self.max_bytes

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counting_receive, send)


class RequestMetrics:
    """Request counts and latencies by route template (not raw path: ids would explode cardinality)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "ablate_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=registry
        )
        self.latency = Histogram(
            "ablate_http_request_duration_seconds",
            "Time to serve an HTTP request.",
            ["method", "route"],
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: RequestMetrics, api_prefix: str = "/api/v1") -> None:
        self.app = app
        self.metrics = metrics
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            template = self._template(scope)
            method = scope.get("method", "GET")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")
        template = getattr(route, "path", None)
        if not template:
            return "unmatched"
        # Routes of included routers carry their own path; the include prefix is not part of it.
        prefix = self.api_prefix
        if prefix and not template.startswith(prefix) and scope.get("path", "").startswith(prefix + "/"):
            template = prefix + template
        return template
