"""ASGI middleware: the request-body cap and request metrics.

Plain ASGI (not ``BaseHTTPMiddleware``) so bodies stream through untouched and nothing is buffered.
"""

from __future__ import annotations

import json
import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ablate.backend.api.problems import PROBLEM


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a body without (or lying about) Content-Length passes the cap.

    An HTTPException so FastAPI's body reader re-raises it and the problem handler answers 413.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(
        {
            "type": "urn:ablate:problem:payload-too-large",
            "title": "Payload too large",
            "status": 413,
            "detail": f"request body exceeds the limit of {limit} bytes",
            "errors": [],
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
