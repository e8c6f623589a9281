"""In Chromium: the Content-Security-Policy lets the report and the docs work (no violation in the
console), and a browser signs in once at /login when reads need a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.databases import DatabaseFactory
from tests.support.live_server import start_live_server
from tests.web import seed
from tests.web.conftest import Console, Site
from tests.web.helpers import assert_no_console_errors, chart_state, open_page, shoot
from tests.web.test_pages import pages

pytestmark = pytest.mark.browser


def test_report_draws_its_charts_under_the_csp(page: Any, site: Site, console: Console) -> None:
    response = page.goto(f"{site.url}/api/v1/releases/{quote(seed.NEW, safe=':')}/report?format=html")
    assert response is not None and response.status == 200
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    # A file of its own, the report links no favicon; the browser's guess at /favicon.ico is a 404.
    console.expected.append("status of 404 (Not Found)")
    assert_no_console_errors(console)


# Installed before any page script: every CSP violation event of the page, recorded.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation',
  e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));
"""


def test_no_page_needs_an_inline_script(page: Any, site: Site, console: Console) -> None:
    """script-src has no 'unsafe-inline', and no page, chart, docs page or report violates the policy."""
    page.set_default_timeout(60_000)  # a dozen pages and a 5 MB report, on a loaded machine
    page.add_init_script(RECORD_VIOLATIONS)
    ref = quote(seed.NEW, safe=":")
    for name, path in [*pages(site).items(), ("report", f"/api/v1/releases/{ref}/report?format=html")]:
        response = open_page(page, site.url + path) if name != "report" else page.goto(site.url + path)
        script_src = next(
            d for d in response.headers["content-security-policy"].split("; ") if d.startswith("script-src")
        )
        assert "'unsafe-inline'" not in script_src, (name, script_src)
        if name == "report":
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
        for state in chart_state(page):
            assert state["rendered"] and state["hasSvg"], (name, state)
        assert page.evaluate("() => window.__violations") == [], name
    for path, ready in (("/docs", ".swagger-ui .info .title"), ("/redoc", "[role=search], .api-content")):
        response = page.goto(site.url + path)
        assert "'unsafe-inline'" not in response.headers["content-security-policy"].split("; ")[1], path
        page.wait_for_selector(ready, timeout=30_000)
        # ReDoc's footer logo is served from here (its bundle named Redocly's CDN): nothing to block.
        assert page.evaluate("() => window.__violations") == [], path
    console.expected += ["status of 404 (Not Found)"]
    assert_no_console_errors(console)


def test_swagger_ui_and_redoc_render_offline(
    page: Any, site: Site, console: Console, screenshots: Path
) -> None:
    # Only this server is reachable: any CDN request would fail and show in the console.
    page.route(
        "**/*", lambda route: route.continue_() if route.request.url.startswith(site.url) else route.abort()
    )
    page.goto(f"{site.url}/docs")
    page.wait_for_selector(".swagger-ui .info .title")
    assert page.locator("button.authorize").count() == 1  # the bearer scheme
    assert page.locator(".opblock").count() >= 29
    shoot(page, screenshots, "docs")
    page.goto(f"{site.url}/redoc")
    page.wait_for_selector("[role=search], .api-content", timeout=30_000)
    assert_no_console_errors(console)


def test_browser_signs_in_once(page: Any, db_factory: DatabaseFactory, console: Console) -> None:
    server = start_live_server(db_factory.new("sqlite"), settings={"read_requires_token": True})
    try:
        secret = seed.make_token(server.database, "browser", "read")
        page.goto(f"{server.url}/clusters")
        assert page.url == f"{server.url}/login?next=/clusters"
        page.fill("#token", "abl_wrong")
        page.click("#login button[type=submit]")
        assert page.locator(".alert").inner_text().startswith("That token is unknown")
        console.expected.append("401")  # the refused sign-in is a 401 page
        page.fill("#token", secret)
        page.click("#login button[type=submit]")
        page.wait_for_url(f"{server.url}/clusters")
        assert page.locator("h1").first.inner_text().strip()
        assert page.evaluate("() => document.cookie") == ""  # HttpOnly: no script can read the token
        open_page(page, f"{server.url}/releases")
        for state in chart_state(page):
            assert state["rendered"], state
        assert_no_console_errors(console)
    finally:
        server.stop()
