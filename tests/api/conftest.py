"""Fixtures for API tests: the real app over HTTP on the parametrised database (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ablate.backend.db.database import Database
from ablate.backend.services import tokens
from tests.support.live_server import LiveServer, start_live_server


@pytest.fixture
def live_server(db_url: str) -> Iterator[LiveServer]:
    server = start_live_server(db_url)
    try:
        yield server
    finally:
        server.stop()


def make_token(database: Database, name: str, scope: str) -> str:
    with database.transaction() as session:
        _, secret = tokens.create_token(session, name, scope)
    return secret


@pytest.fixture
def admin_token(live_server: LiveServer) -> str:
    return make_token(live_server.database, "test-admin", "admin")


@pytest.fixture
def submit_token(live_server: LiveServer) -> str:
    return make_token(live_server.database, "test-ci", "submit")


@pytest.fixture
def read_token(live_server: LiveServer) -> str:
    return make_token(live_server.database, "test-reader", "read")


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    """An anonymous client on ``/api/v1``; pass ``headers=auth(token)`` per request."""
    with httpx.Client(base_url=live_server.api, timeout=30.0) as c:
        yield c


@pytest.fixture
def admin(live_server: LiveServer, admin_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.api, timeout=30.0, headers=auth(admin_token)) as c:
        yield c


@pytest.fixture
def ci(live_server: LiveServer, submit_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.api, timeout=30.0, headers=auth(submit_token)) as c:
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
