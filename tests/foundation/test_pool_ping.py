"""A pooled PostgreSQL connection is pinged before reuse only once it sat idle ``PING_IDLE_S`` or
more (backend/db/session.py); one whose server process ended meanwhile is replaced, not handed out."""

from __future__ import annotations

import time

from sqlalchemy import text

from ablate.backend.db import session
from tests.support.databases import DatabaseFactory


def test_an_idle_pooled_connection_whose_server_process_ended_is_replaced(
    db_factory: DatabaseFactory,
) -> None:
    url = db_factory.new_postgresql(migrated=False)
    engine, admin = session.make_engine(url), session.make_engine(url)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as conn:  # the pool hands the same connection back
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() == pid
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
        time.sleep(session.PING_IDLE_S + 0.2)
        with engine.connect() as conn:  # pinged, found gone, replaced: no error reaches the caller
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()
        admin.dispose()
        db_factory.drop(url)


def test_a_pooled_connection_the_server_ended_within_the_second_is_replaced(
    db_factory: DatabaseFactory,
) -> None:
    # No wait for the idle second: the server's goodbye left the pooled socket readable.
    url = db_factory.new_postgresql(migrated=False)
    engine, admin = session.make_engine(url), session.make_engine(url)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid}).scalar_one()
        with engine.connect() as conn:  # pinged, found gone, replaced: no error reaches the caller
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()
        admin.dispose()
        db_factory.drop(url)
