"""Browser fixtures: one headless Chromium per session, one seeded live server per backend.

Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright for Python; no browser is ever
downloaded. Each test gets a fresh page at 1280x900 that records console errors and page errors.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.databases import DatabaseFactory
from tests.support.live_server import LiveServer, start_live_server
from tests.web import seed

CHROMIUM = os.environ.get("ABLATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}

playwright_sync = pytest.importorskip("playwright.sync_api")


@dataclass
class Site:
    server: LiveServer
    data: seed.Seeded
    backend: str

    @property
    def url(self) -> str:
        return self.server.url


@dataclass
class Console:
    """Console errors and uncaught page errors of one page."""

    errors: list[str] = field(default_factory=list)
    # Errors the test provoked on purpose (e.g. a 401 from a wrong token), by substring.
    expected: list[str] = field(default_factory=list)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(x in e for x in self.expected)]


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def _site(db_factory: DatabaseFactory, backend: str) -> Iterator[Site]:
    server = start_live_server(db_factory.new(backend))
    try:
        yield Site(server=server, data=seed.seed(server.api, server.database), backend=backend)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def site(db_factory: DatabaseFactory) -> Iterator[Site]:
    """The SQLite-backed live server with the seeded releases, runs and a failed run."""
    yield from _site(db_factory, "sqlite")


@pytest.fixture(scope="session")
def pg_site(db_factory: DatabaseFactory) -> Iterator[Site]:
    """The same data on PostgreSQL, for one pass of the page-load test."""
    yield from _site(db_factory, "postgresql")


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(browser: object, console: Console) -> Iterator[object]:
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)  # type: ignore[attr-defined]
    page = context.new_page()
    # A bound, not a speed check: a first page load took over 15 s at load average 20 on 2 cores.
    page.set_default_timeout(45_000)
    page.on("console", lambda m: console.errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: console.errors.append(f"pageerror: {exc}"))
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="session")
def screenshots(artifacts_dir: Path) -> Path:
    path = artifacts_dir / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
