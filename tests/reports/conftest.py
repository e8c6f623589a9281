"""Fixtures of the report and comparison tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reports import seed
from tests.support.live_server import LiveServer, start_live_server


@pytest.fixture
def server(db_url: str) -> Iterator[LiveServer]:
    """A live server on the parametrised database with the standard three releases (seed.py)."""
    live = start_live_server(db_url)
    try:
        seed.seed_standard(live.database)
        yield live
    finally:
        live.stop()
