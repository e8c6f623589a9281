"""Which database errors mean "cannot be reached now, retry" (503, a dispatcher that waits) and which
are a bug or a schema problem (500): real errors from real SQLite and PostgreSQL connections."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, exc, text

from ablate.backend.db.database import unavailable


def _error(url: str, sql: str, **connect_args: object) -> exc.DBAPIError:
    engine = create_engine(url, connect_args=connect_args)
    try:
        with pytest.raises(exc.DBAPIError) as err, engine.connect() as conn:
            conn.execute(text(sql))
        return err.value
    finally:
        engine.dispose()


def test_a_locked_sqlite_database_is_unavailable_a_missing_table_is_not(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert unavailable(_error(f"sqlite:///{path}", "SELECT * FROM t", timeout=0.1))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not unavailable(_error(f"sqlite:///{path}", "SELECT * FROM missing"))
    assert not unavailable(ValueError("not a database error"))


def test_a_refused_postgresql_connection_is_unavailable_a_bad_statement_is_not(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's errors")
    assert not unavailable(_error(db_url, "SELECT * FROM missing"))
    assert not unavailable(_error(db_url, "SELECT 1/0"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert unavailable(_error(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", "SELECT 1"))
