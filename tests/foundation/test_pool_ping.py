"""A pooled PostgreSQL connection is pinged before reuse once it sat idle ``PING_IDLE_S`` or more, or
at once when the server wrote to it meanwhile (backend/db/session.py); one whose server process ended
is replaced, not handed out."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from ablate.backend.db import session
from tests.support.databases import DatabaseFactory

Engines = tuple[Engine, Engine]  # the pool under test, and an admin engine that ends its sessions


@pytest.fixture
def engines(db_factory: DatabaseFactory) -> Iterator[Engines]:
    url = db_factory.new_postgresql(migrated=False)
    engine, admin = session.make_engine(url), session.make_engine(url)
    try:
        yield engine, admin
    finally:
        engine.dispose()
        admin.dispose()
        db_factory.drop(url)


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(admin: Engine, pid: int, wait_ms: int = 0) -> None:
    """End ``pid``'s session; with ``wait_ms``, wait (bounded) until its process has gone."""
    with admin.connect() as conn:
        ended = conn.execute(text("SELECT pg_terminate_backend(:pid, :ms)"), {"pid": pid, "ms": wait_ms})
        assert ended.scalar_one()


def test_an_idle_pooled_connection_whose_server_process_ended_is_replaced(engines: Engines) -> None:
    engine, admin = engines
    pid = _backend_pid(engine)
    assert _backend_pid(engine) == pid  # the pool hands the same connection back
    _terminate(admin, pid)
    time.sleep(session.PING_IDLE_S + 0.2)
    assert _backend_pid(engine) != pid  # pinged, found gone, replaced: no error reaches the caller


def test_a_pooled_connection_the_server_ended_within_the_second_is_replaced(engines: Engines) -> None:
    # No wait for the idle second: the server's goodbye left the pooled socket readable.
    engine, admin = engines
    pid = _backend_pid(engine)
    _terminate(admin, pid, wait_ms=5000)
    assert _backend_pid(engine) != pid  # pinged, found gone, replaced: no error reaches the caller
