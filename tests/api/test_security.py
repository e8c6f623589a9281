"""Read protection of everything (API, pages, report, docs, /metrics), the login cookie, security
headers on every response, offline docs and the OpenAPI document, Unicode export file names."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, unquote

import httpx
import pytest

from tests.api.conftest import auth, make_token
from tests.api.helpers import REF, assert_problem, create_release, result
from tests.support.live_server import LiveServer, start_live_server

PAGES = ["/", "/releases", f"/releases/{REF}", "/compare", "/studies", "/studies/1", "/runs/1", "/clusters"]


@pytest.fixture
def locked(db_url: str) -> Iterator[LiveServer]:
    server = start_live_server(db_url, settings={"read_requires_token": True, "metrics_requires_token": True})
    try:
        yield server
    finally:
        server.stop()


def _seed(server: LiveServer) -> dict[str, str]:
    secrets = {
        scope: make_token(server.database, f"t-{scope}", scope) for scope in ("read", "submit", "admin")
    }
    with httpx.Client(base_url=server.api, headers=auth(secrets["admin"]), timeout=30) as admin:
        create_release(admin)
    with httpx.Client(base_url=server.api, headers=auth(secrets["submit"]), timeout=30) as ci:
        assert ci.post("/results", json={"results": [result()]}).status_code == 201
    return secrets


def _login(server: LiveServer, secret: str, next_url: str = "/") -> httpx.Response:
    return httpx.post(f"{server.url}/login", data={"token": secret, "next": next_url}, timeout=30)


def test_every_read_needs_a_token_when_asked(locked: LiveServer) -> None:
    secrets = _seed(locked)
    with httpx.Client(base_url=locked.url, timeout=30) as anonymous:
        for path in PAGES:
            response = anonymous.get(path)
            assert response.status_code == 303, (path, response.status_code)
            assert response.headers["location"] == f"/login?next={quote(path, safe='/')}", path
        for path in (
            "/api/v1/runs/1",
            "/api/v1/runs",
            f"/api/v1/releases/{REF}/comparison",
            f"/api/v1/releases/{REF}/report?format=csv",
            "/api/v1/openapi.json",
            "/metrics",
        ):
            assert_problem(anonymous.get(path), 401)
        for path in ("/docs", "/redoc"):
            response = anonymous.get(path)
            assert response.status_code == 303 and response.headers["location"].startswith("/login"), path
        # What a signed-out browser still needs: the form, its styles, the probes.
        for path in ("/login", "/static/ablate.css", "/healthz", "/readyz"):
            assert anonymous.get(path).status_code == 200, path
    with httpx.Client(base_url=locked.url, timeout=30, headers=auth(secrets["read"])) as reader:
        for path in PAGES:
            assert reader.get(path).status_code in (200, 404), path
        assert reader.get("/runs/1").status_code == 200
        assert reader.get(f"/api/v1/releases/{REF}/report?format=html").status_code == 200
        assert reader.get("/api/v1/openapi.json").status_code == 200
        assert reader.get("/docs").status_code == 200 and reader.get("/redoc").status_code == 200
        assert reader.get("/metrics").status_code == 200


def test_metrics_has_its_own_setting(db_url: str) -> None:
    with start_live_server(db_url, settings={"read_requires_token": True}) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 200
        assert httpx.get(f"{server.url}/runs/1").status_code == 303
    with start_live_server(db_url, settings={"metrics_requires_token": True}) as server:
        assert_problem(httpx.get(f"{server.url}/metrics"), 401)
        assert httpx.get(f"{server.url}/runs/1").status_code == 404  # reads stay open
        token = make_token(server.database, "scraper", "read")
        assert httpx.get(f"{server.url}/metrics", headers=auth(token)).status_code == 200


def test_login_sets_a_strict_http_only_cookie(locked: LiveServer) -> None:
    secrets = _seed(locked)
    wrong = _login(locked, "abl_not-a-token", "/runs/1")
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers and "unknown" in wrong.text
    response = _login(locked, secrets["read"], "/runs/1?x=1")
    assert response.status_code == 303 and response.headers["location"] == "/runs/1?x=1"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("ablate_token=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    jar = response.cookies
    with httpx.Client(base_url=locked.url, timeout=30, cookies=jar) as browser:
        for path in PAGES:
            assert browser.get(path).status_code in (200, 404), path
        assert browser.get("/runs/1").status_code == 200
        # The pages' own scripts read the API with the cookie ...
        assert browser.get("/api/v1/runs/1").status_code == 200
        assert browser.get(f"/api/v1/releases/{REF}/report?format=md").status_code == 200
        assert browser.get("/docs").status_code == 200
        # ... but a cookie never authorises a write (that would be forgeable from another site).
        admin_cookie = _login(locked, secrets["admin"]).cookies
        with httpx.Client(base_url=locked.url, timeout=30, cookies=admin_cookie) as admin_browser:
            assert_problem(admin_browser.post("/api/v1/tokens", json={"name": "x", "scope": "read"}), 401)
        out = browser.post("/logout")
        assert out.status_code == 303 and 'ablate_token=""' in out.headers["set-cookie"]
    # Only a path of this site is a target after login.
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        assert _login(locked, secrets["read"], target).headers["location"] == "/", target
    # A revoked token's cookie stops working at once.
    with httpx.Client(base_url=locked.api, headers=auth(secrets["admin"]), timeout=30) as admin:
        reader_id = next(t["id"] for t in admin.get("/tokens").json() if t["name"] == "t-read")
        assert admin.post(f"/tokens/{reader_id}/revoke").status_code == 200
    assert httpx.get(f"{locked.url}/runs/1", cookies=jar).status_code == 303


SECURITY_HEADERS = ("x-content-type-options", "content-security-policy", "referrer-policy", "x-frame-options")


def test_security_headers_on_every_response(live_server: LiveServer, admin: httpx.Client) -> None:
    create_release(admin)
    url = live_server.url
    responses = [
        httpx.get(f"{url}/"),
        httpx.get(f"{url}/static/ablate.css"),
        httpx.get(f"{url}/nope"),
        httpx.get(f"{url}/api/v1/runs"),
        httpx.get(f"{url}/api/v1/runs/12345"),
        httpx.get(f"{url}/api/v1/runs?variant=%00"),
        httpx.get(f"{url}/api/v1/releases/{REF}/report?format=html"),
        httpx.post(f"{url}/api/v1/results", content=b"x" * (live_server.settings.max_body_bytes + 1)),
        httpx.get(f"{url}/docs"),
        httpx.get(f"{url}/metrics"),
    ]
    for response in responses:
        for name in SECURITY_HEADERS:
            assert name in response.headers, (response.request.url, name)
        assert response.headers["x-content-type-options"] == "nosniff"
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "object-src 'none'" in csp


def test_docs_are_served_offline_with_a_bearer_scheme(live_server: LiveServer) -> None:
    # ReDoc's bundle is served with its CDN logo replaced (/docs/redoc.js), Swagger's as it is.
    for path, asset in (("/docs", "/docs/assets/swagger-ui-bundle.js"), ("/redoc", "/docs/redoc.js")):
        page = httpx.get(live_server.url + path)
        assert page.status_code == 200 and asset in page.text, path
        assert "cdn" not in page.text.lower() and "googleapis" not in page.text, path
        script = httpx.get(f"{live_server.url}{asset}")
        assert script.status_code == 200 and len(script.content) > 100_000, asset
    spec = httpx.get(f"{live_server.api}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token: `ablate token create`.",
    }
    operations = [(p, m, op) for p, ops in spec["paths"].items() for m, op in ops.items()]
    assert len(operations) >= 29
    for path, method, op in operations:
        assert "422" in op["responses"], (path, method)
        # 414/431: the server refuses a too long request line or head before any route, in plain text
        assert (
            op["responses"]["414"]["content"]
            == op["responses"]["431"]["content"]
            == {"text/plain": {"schema": {"type": "string"}}}
        ), (path, method)
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")) and status not in ("414", "431"):
                assert response["content"] == {
                    "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
                }, (path, method, status)
    assert spec["paths"]["/api/v1/tokens"]["post"]["security"] == [{"bearer": []}]
    assert {"401", "403", "409", "413", "400"} <= set(spec["paths"]["/api/v1/results"]["post"]["responses"])


@pytest.mark.parametrize("tag", ["25.12ł", "26.01-β", "26.02-日本"])
def test_report_exports_any_unicode_tag(
    live_server: LiveServer, admin: httpx.Client, ci: httpx.Client, tag: str
) -> None:
    create_release(admin, tag=tag)
    ref = f"training-nv-pytorch:{tag}"
    assert ci.post("/results", json={"results": [result(release=ref)]}).status_code == 201
    for fmt in ("html", "md", "csv", "json"):
        response = ci.get(
            f"/releases/{quote(ref, safe=':')}/report", params={"format": fmt, "download": "true"}
        )
        assert response.status_code == 200, (fmt, response.text)
        disposition = response.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="') and disposition.isascii(), disposition
        encoded = disposition.split("filename*=UTF-8''", 1)[1]
        name = unquote(encoded)
        assert tag in name and name.endswith(f".{fmt}"), (disposition, name)
